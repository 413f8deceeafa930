r"""Checks an experiment config: `python -m paxml.tools.validate_config`.

Example:

  python -m paxml.tools.validate_config \
      --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2B --check_level=5

See validate_config_lib for the levels.
"""

from paxml.tools import validate_config_lib

if __name__ == '__main__':
  validate_config_lib.main()
