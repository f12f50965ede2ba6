"""The log generator: the job, the simulated world, feature values and JSON-lines rendering."""
