"""Tests of paxml._host_memory: when it applies, and that freed memory is
reused (page faults counted by the kernel, in fresh processes)."""

import platform
import subprocess
import sys
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
from paxml import _host_memory

_GLIBC = platform.system() == 'Linux' and platform.libc_ver()[0] == 'glibc'

# Touches a 256 MiB numpy array twice (freed in between) and prints the
# minor page faults of each time: the second time costs none when the freed
# block was kept in the heap.
_FAULTS = textwrap.dedent('''
    import resource, sys
    import numpy as np
    from paxml import _host_memory
    if sys.argv[1] == 'keep':
      assert _host_memory.keep_freed_memory()
    def faults_of_a_new_array():
      before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
      a = np.ones((256 << 20) // 4, np.float32)
      faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
      del a
      return faults
    print(faults_of_a_new_array(), faults_of_a_new_array())
''')


def _faults(mode: str) -> tuple[int, int]:
  result = subprocess.run([sys.executable, '-c', _FAULTS, mode],
                          capture_output=True, text=True, check=True)
  first, second = map(int, result.stdout.split())
  return first, second


class RunsOnCpuOnlyTest(parameterized.TestCase):

  @parameterized.parameters(
      ('cpu', ['xla_cuda12'], True),
      ('CPU', [], True),
      ('cuda', [], False),
      ('cuda,cpu', [], False),
      ('cpu,cuda', ['xla_cuda12'], True),
      (None, [], True),
      ('', [], True),
      (None, ['xla_cuda12'], False),
      (None, ['libtpu'], False),
  )
  def test_first_platform_or_installed_plugins(self, platforms, plugins,
                                               expected):
    self.assertEqual(
        _host_memory.runs_on_cpu_only(platforms, plugins), expected)


@absltest.skipUnless(_GLIBC, 'glibc only')
class KeepFreedMemoryTest(absltest.TestCase):

  def test_a_freed_block_is_reused_without_page_faults(self):
    first, second = _faults('keep')
    self.assertGreater(first, 0)
    self.assertEqual(second, 0)

  def test_by_default_a_freed_block_is_faulted_in_again(self):
    first, second = _faults('default')
    self.assertGreater(second, first // 2)


if __name__ == '__main__':
  absltest.main()
