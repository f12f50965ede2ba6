"""The engine: one resident Spark Connect server per home, and the thin clients every Spark command can be.

``state`` holds its files under ``<home>/engine/`` (token, state, heartbeat, lock, log) and the code
version clients and engine must share; ``server`` is the engine's process; ``client`` finds, starts
or restarts it and connects; ``command`` is ``featurehouse engine start|stop|status|logs``.
"""
