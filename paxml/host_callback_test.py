"""Tests of host_callback.Repository: ids, eviction order, namespaces."""

import threading

from absl.testing import absltest
from paxml import host_callback


class RepositoryTest(absltest.TestCase):

  def test_ids_count_up_and_strings_read_back(self):
    repo = host_callback.Repository()
    ids = [repo.add(s) for s in ('a', 'b', 'c')]
    self.assertEqual(ids, [0, 1, 2])
    self.assertEqual([repo.get(i) for i in ids], ['a', 'b', 'c'])
    self.assertTrue(repo.pop(1))
    self.assertFalse(repo.pop(1))
    self.assertEqual(repo.size, 2)
    with self.assertRaises(KeyError):
      repo.get(1)

  def test_oldest_strings_are_evicted_first(self):
    repo = host_callback.Repository(max_size=2)
    for s in 'wxyz':
      repo.add(s)
    self.assertEqual(repo.size, 2)
    self.assertEqual((repo.get(2), repo.get(3)), ('y', 'z'))
    for evicted in (0, 1):
      with self.assertRaises(KeyError):
        repo.get(evicted)
    # Popping a middle one leaves the eviction order of the rest intact.
    repo.pop(2)
    repo.add('u')
    repo.add('v')
    self.assertEqual((repo.get(4), repo.get(5)), ('u', 'v'))

  def test_bad_size_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'max_size'):
      host_callback.Repository(max_size=0)

  def test_namespaces_are_singletons(self):
    a = host_callback.repository('h5_test_a')
    self.assertIs(a, host_callback.repository('h5_test_a'))
    self.assertIsNot(a, host_callback.repository('h5_test_b'))

  def test_concurrent_adds_get_distinct_ids(self):
    repo = host_callback.Repository()
    ids = []

    def work():
      for _ in range(200):
        ids.append(repo.add('s'))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    self.assertEqual(sorted(ids), list(range(800)))


if __name__ == '__main__':
  absltest.main()
