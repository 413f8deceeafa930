"""Errors that stop a run which was set up correctly.

Private; public as `paxml.train.RunStoppedError` (and its subclasses
`checkpoints.CheckpointSaveError`, `NonFiniteTrainingError`). Their message
is one line meant for the console: `paxml.main` prints it without a
traceback and exits with status 1.
"""


class RunStoppedError(RuntimeError):
  """The run stopped early for a reason its message names in one line."""
