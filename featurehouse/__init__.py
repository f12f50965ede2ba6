"""The ``featurehouse`` command line: one entry point whose subcommands run the jobs."""
