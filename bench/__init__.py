"""The benchmark suite (``featurehouse bench``) and the benchmarks that run on their own.

Run a benchmark from the repository's root as a module: ``python -m bench.label_join --help``.
"""
