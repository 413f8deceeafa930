"""Language-model experiments (`paxml.tasks.lm`): base configs and inputs."""
