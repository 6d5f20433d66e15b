"""File contents of the five sample repositories, commit by commit (read by make_repos.py)."""

TEXTSTATS_V1 = '''"""Small text statistics."""


def word_count(text):
    """Number of words in `text`."""
    return len([w for w in text.split(" ")])


def longest_word(text):
    words = text.split()
    return max(words, key=len) if words else ""
'''
TEXTSTATS_FIX = '''"""Small text statistics."""


def word_count(text):
    """Number of words in `text`; any run of whitespace separates words."""
    return len(text.split())


def longest_word(text):
    words = text.split()
    return max(words, key=len) if words else ""
'''
TEXTSTATS_TESTS = '''from textstats import longest_word, word_count


def test_simple():
    assert word_count("one two three") == 3


def test_longest():
    assert longest_word("a bbb cc") == "bbb"
'''

INTERVALS_V1 = '''"""Interval arithmetic on closed integer intervals [start, end]."""


def merge(intervals):
    """Merge overlapping intervals; the result is sorted by start."""
    out = []
    for start, end in sorted(intervals):
        if out and start < out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [tuple(i) for i in out]


def total_length(intervals):
    return sum(end - start for start, end in merge(intervals))
'''
INTERVALS_FIX = INTERVALS_V1.replace("start < out[-1][1]", "start <= out[-1][1]")
INTERVALS_TESTS = '''from intervals import merge, total_length


def test_overlap():
    assert merge([(1, 5), (3, 7)]) == [(1, 7)]


def test_disjoint():
    assert merge([(5, 6), (1, 2)]) == [(1, 2), (5, 6)]


def test_total():
    assert total_length([(0, 2), (1, 4)]) == 4
'''

SLUG_V1 = '''"""URL slugs."""

import re


def slugify(title):
    """Lower-case `title`, keep letters and digits, join words with single dashes."""
    return re.sub(r"[^a-z0-9]", "-", title.lower())
'''
SLUG_FIX = '''"""URL slugs."""

import re


def slugify(title):
    """Lower-case `title`, keep letters and digits, join words with single dashes."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
'''
SLUG_TESTS = '''from slugs import slugify


def test_plain_word():
    assert slugify("Hello") == "hello"


def test_two_words():
    assert slugify("hello world") == "hello-world"
'''

ROMAN_V1 = '''"""Roman numerals."""

NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(n):
    if not 0 < n < 4000:
        raise ValueError("out of range")
    out = []
    for value, letters in NUMERALS:
        count, n = divmod(n, value)
        out.append(letters * count)
    return "".join(out)
'''
ROMAN_FIX = ROMAN_V1.replace(
    'NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]',
    'NUMERALS = [\n    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),\n'
    '    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),\n]',
)
ROMAN_TESTS = '''import pytest

from roman import to_roman


def test_simple():
    assert to_roman(3) == "III"
    assert to_roman(1666) == "MDCLXVI"


def test_range():
    with pytest.raises(ValueError):
        to_roman(0)
'''

LRU_V1 = '''"""A small least-recently-used cache."""

from collections import OrderedDict


class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self._items = OrderedDict()

    def get(self, key, default=None):
        return self._items.get(key, default)

    def put(self, key, value):
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self):
        return len(self._items)
'''
LRU_FIX = LRU_V1.replace(
    "        return self._items.get(key, default)\n",
    "        if key not in self._items:\n            return default\n"
    "        self._items.move_to_end(key)\n        return self._items[key]\n",
)
LRU_TESTS = '''from lru import LRUCache


def test_capacity():
    cache = LRUCache(2)
    for k in "abc":
        cache.put(k, k.upper())
    assert len(cache) == 2
    assert cache.get("a") is None


def test_put_get():
    cache = LRUCache(1)
    cache.put("x", 1)
    assert cache.get("x") == 1
'''

README = "# {name}\n\nA tiny sample library for Horizon's SWE-style eval suite. Run `python3 -m pytest`.\n"

REPOS = {
    "textstats": {
        "history": [
            ("initial import", {"README.md": README.format(name="textstats"), "textstats.py": TEXTSTATS_V1}),
            ("add longest_word and tests", {"tests/test_textstats.py": TEXTSTATS_TESTS}),
        ],
        "fix": {"textstats.py": TEXTSTATS_FIX},
        "tests": {"tests/test_textstats.py": TEXTSTATS_TESTS + '''

def test_multiple_spaces():
    assert word_count("one  two   three") == 3


def test_tabs_and_newlines():
    assert word_count("one\\ttwo\\nthree ") == 3
'''},
        "fix_message": "word_count: split on any whitespace",
        "problem": "`textstats.word_count` over-counts when words are separated by more than one space, "
                   "by tabs or by newlines: `word_count(\"one  two\")` returns 3 instead of 2. "
                   "Any run of whitespace should separate words.",
        "fail_to_pass": ["tests/test_textstats.py::test_multiple_spaces", "tests/test_textstats.py::test_tabs_and_newlines"],
        "pass_to_pass": ["tests/test_textstats.py::test_simple", "tests/test_textstats.py::test_longest"],
    },
    "intervals": {
        "history": [
            ("intervals: merge", {"README.md": README.format(name="intervals"), "intervals.py": INTERVALS_V1}),
            ("tests for merge and total_length", {"tests/test_intervals.py": INTERVALS_TESTS}),
        ],
        "fix": {"intervals.py": INTERVALS_FIX},
        "tests": {"tests/test_intervals.py": INTERVALS_TESTS + '''

def test_touching_intervals_merge():
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]
'''},
        "fix_message": "merge closed intervals that touch",
        "problem": "`intervals.merge` treats intervals as closed, but `merge([(1, 2), (2, 3)])` returns "
                   "`[(1, 2), (2, 3)]` instead of `[(1, 3)]`: intervals that share an end point must merge.",
        "fail_to_pass": ["tests/test_intervals.py::test_touching_intervals_merge"],
        "pass_to_pass": ["tests/test_intervals.py::test_overlap", "tests/test_intervals.py::test_disjoint", "tests/test_intervals.py::test_total"],
    },
    "slugs": {
        "history": [
            ("slugify", {"README.md": README.format(name="slugs"), "slugs.py": SLUG_V1}),
            ("slug tests", {"tests/test_slugs.py": SLUG_TESTS}),
        ],
        "fix": {"slugs.py": SLUG_FIX},
        "tests": {"tests/test_slugs.py": SLUG_TESTS + '''

def test_punctuation_collapses():
    assert slugify("Hello, World!") == "hello-world"


def test_no_leading_or_trailing_dash():
    assert slugify("  --Rust & Go--  ") == "rust-go"
'''},
        "fix_message": "slugify: collapse separators, trim dashes",
        "problem": "`slugify(\"Hello, World!\")` gives `hello--world-` but should give `hello-world`: runs of "
                   "characters that are not letters or digits must become a single dash, with no dash at "
                   "either end.",
        "fail_to_pass": ["tests/test_slugs.py::test_punctuation_collapses", "tests/test_slugs.py::test_no_leading_or_trailing_dash"],
        "pass_to_pass": ["tests/test_slugs.py::test_plain_word", "tests/test_slugs.py::test_two_words"],
    },
    "roman": {
        "history": [
            ("roman numerals, additive form", {"README.md": README.format(name="roman"), "roman.py": ROMAN_V1}),
            ("tests", {"tests/test_roman.py": ROMAN_TESTS}),
        ],
        "fix": {"roman.py": ROMAN_FIX},
        "tests": {"tests/test_roman.py": ROMAN_TESTS + '''

@pytest.mark.parametrize("n,expected", [(4, "IV"), (9, "IX"), (40, "XL"), (1994, "MCMXCIV")])
def test_subtractive(n, expected):
    assert to_roman(n) == expected
'''},
        "fix_message": "to_roman: subtractive notation",
        "problem": "`roman.to_roman(4)` returns `IIII` and `to_roman(1994)` returns `MDCCCCLXXXXIIII`. "
                   "Use standard subtractive notation (IV, IX, XL, XC, CD, CM).",
        "fail_to_pass": ["tests/test_roman.py::test_subtractive[4-IV]", "tests/test_roman.py::test_subtractive[9-IX]",
                         "tests/test_roman.py::test_subtractive[40-XL]", "tests/test_roman.py::test_subtractive[1994-MCMXCIV]"],
        "pass_to_pass": ["tests/test_roman.py::test_simple", "tests/test_roman.py::test_range"],
    },
    "lru": {
        "history": [
            ("LRU cache", {"README.md": README.format(name="lru"), "lru.py": LRU_V1}),
            ("tests", {"tests/test_lru.py": LRU_TESTS}),
        ],
        "fix": {"lru.py": LRU_FIX},
        "tests": {"tests/test_lru.py": LRU_TESTS + '''

def test_get_refreshes_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert cache.get("a") == 1
    assert cache.get("b") is None
'''},
        "fix_message": "LRUCache.get marks the key as recently used",
        "problem": "`LRUCache.get` does not count as a use: after `put(a)`, `put(b)`, `get(a)`, `put(c)` on a "
                   "cache of capacity 2, `a` is evicted instead of `b`. Reading a key must make it the most "
                   "recently used.",
        "fail_to_pass": ["tests/test_lru.py::test_get_refreshes_recency"],
        "pass_to_pass": ["tests/test_lru.py::test_capacity", "tests/test_lru.py::test_put_get"],
    },
}
