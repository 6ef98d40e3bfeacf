# _dict_positions.py — owns the run-time reads of a dict entry by position (Source kinds DictKey / DictValue) that
# rewritten code makes when it loads such a graph input itself.
import itertools


def key_at(d, i):
    """The key at position ``i`` of dict ``d`` in its storage order (a subclass's own iteration is not used)."""
    return next(itertools.islice(dict.keys(d), i, None))


def value_at(d, i):
    """The value at position ``i`` of dict ``d`` in its storage order."""
    return next(itertools.islice(dict.values(d), i, None))
