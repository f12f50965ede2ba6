"""The structured-streaming label join: the job, its plan, its tables and the publish step of closed days."""
