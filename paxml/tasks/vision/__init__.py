"""Vision experiments (`paxml.tasks.vision.params`)."""
