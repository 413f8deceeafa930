r"""Writes an experiment's configs as text: `python -m paxml.tools.dump_hparams`.

Example:

  python -m paxml.tools.dump_hparams \
      --exp=tasks.lm.params.lm_cloud.LmCloudTransformerAdamTest \
      --params_ofile=/tmp/lm.txt --post_init_params_ofile=/tmp/lm_post.txt

Without --params_ofile the configs go to stdout. See dump_hparams_lib.
"""

from paxml.tools import dump_hparams_lib

if __name__ == '__main__':
  dump_hparams_lib.main()
