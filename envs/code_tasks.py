"""The task bank of ``ragen2/Code-v0``: small Python function tasks in three difficulty levels.

All tasks were written for this project (none is taken from a dataset). Each :class:`CodeTask` has
a statement with one example, the function signature, a reference solution, a one-line approach
(used as the warm-start reasoning), and hidden tests: argument tuples, edge cases included. The
expected outputs are not written here: :meth:`CodeTask.expected` computes them by running the
reference solution in the trusted parent process (once, lazily), so they cannot disagree with it.

Levels: 1 = one-liners, 2 = loops and dicts, 3 = classic algorithms. Arguments and results are
plain data (None, bool, int, float, str, list, tuple, dict, set), so they travel through the
sandbox as literals and compare exactly (see :func:`ragen2_envs.sandbox.values_match`).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TASKS", "CodeTask", "tasks_for"]

_LOCK = threading.Lock()


@dataclass(frozen=True)
class CodeTask:
    name: str
    difficulty: int
    signature: str  # "def f(a: int) -> int"
    statement: str  # one paragraph with one example
    reference: str  # source of a correct solution
    tests: tuple[tuple, ...]  # hidden argument tuples
    approach: str  # one sentence: how to solve it
    _expected: list = field(default_factory=list, compare=False, repr=False)

    @property
    def function(self) -> str:
        return self.signature.split("def ", 1)[1].split("(", 1)[0].strip()

    def expected(self) -> list[Any]:
        """Outputs of the reference solution on the hidden tests (trusted code, run in-process)."""
        with _LOCK:
            if not self._expected:
                namespace: dict[str, Any] = {}
                exec(compile(self.reference, f"<reference {self.name}>", "exec"), namespace)
                fn = namespace[self.function]
                self._expected.extend(fn(*copy.deepcopy(args)) for args in self.tests)
            return copy.deepcopy(self._expected)

    def call_text(self, args: tuple) -> str:
        """How a call looks in feedback: ``name(1, [2, 3])``."""
        return f"{self.function}({', '.join(repr(a) for a in args)})"


def _t(name, difficulty, signature, statement, reference, tests, approach) -> CodeTask:
    return CodeTask(name, difficulty, signature, " ".join(statement.split()),
                    reference.strip("\n") + "\n", tuple(tests), approach)


TASKS: tuple[CodeTask, ...] = (
    # ------------------------------------------------------------------ level 1: one-liners
    _t("reverse_string", 1, "def reverse_string(s: str) -> str",
       """Return the string s with its characters in reverse order.
       Example: reverse_string("abc") returns "cba".""",
       """
def reverse_string(s: str) -> str:
    return s[::-1]
""",
       [("abc",), ("",), ("a",), ("racecar",), ("Hello, World!",), ("ab cd",)],
       "A slice with step -1 reverses a string."),
    _t("sum_of_evens", 1, "def sum_of_evens(nums: list[int]) -> int",
       """Return the sum of the even numbers in the list nums (0 when there are none).
       Negative even numbers count too. Example: sum_of_evens([1, 2, 3, 4]) returns 6.""",
       """
def sum_of_evens(nums: list[int]) -> int:
    return sum(n for n in nums if n % 2 == 0)
""",
       [([1, 2, 3, 4],), ([],), ([1, 3, 5],), ([-2, -3, 4],), ([0],), ([10, 20, 31, 7, 2],)],
       "Sum the numbers whose remainder modulo 2 is zero."),
    _t("count_vowels", 1, "def count_vowels(s: str) -> int",
       """Return how many characters of s are vowels: a, e, i, o, u in lower or upper case
       (y is not a vowel). Example: count_vowels("Hello World") returns 3.""",
       """
def count_vowels(s: str) -> int:
    return sum(1 for ch in s if ch in "aeiouAEIOU")
""",
       [("Hello World",), ("",), ("rhythm",), ("AEIOUaeiou",), ("Yay!",), ("Programming in Python",)],
       "Count the characters that belong to the set of vowels in both cases."),
    _t("clamp", 1, "def clamp(x: int, lo: int, hi: int) -> int",
       """Return x limited to the range from lo to hi: lo if x < lo, hi if x > hi, otherwise x.
       You may assume lo <= hi. Example: clamp(15, 0, 10) returns 10.""",
       """
def clamp(x: int, lo: int, hi: int) -> int:
    return max(lo, min(x, hi))
""",
       [(15, 0, 10), (-5, 0, 10), (5, 0, 10), (0, 0, 10), (10, 0, 10), (3, 3, 3), (-7, -10, -8)],
       "Take the minimum with hi, then the maximum with lo."),
    _t("is_palindrome", 1, "def is_palindrome(s: str) -> bool",
       """Return True if s reads the same forwards and backwards when upper and lower case are
       treated as equal (every other character counts as it is), else False. The empty string is
       a palindrome. Example: is_palindrome("Level") returns True.""",
       """
def is_palindrome(s: str) -> bool:
    t = s.lower()
    return t == t[::-1]
""",
       [("Level",), ("",), ("ab",), ("A man a plan",), ("Abba",), ("x",), ("no on",)],
       "Lower-case the string and compare it with its reverse."),
    _t("max_of_three", 1, "def max_of_three(a: int, b: int, c: int) -> int",
       """Return the largest of the three integers a, b and c.
       Example: max_of_three(3, 9, 4) returns 9.""",
       """
def max_of_three(a: int, b: int, c: int) -> int:
    return max(a, b, c)
""",
       [(3, 9, 4), (1, 1, 1), (-5, -2, -9), (7, 3, 7), (0, -1, 0), (100, 99, 101)],
       "The built-in max takes several arguments."),
    _t("last_digit", 1, "def last_digit(n: int) -> int",
       """Return the last decimal digit of the integer n, ignoring its sign.
       Example: last_digit(-1234) returns 4.""",
       """
def last_digit(n: int) -> int:
    return abs(n) % 10
""",
       [(-1234,), (0,), (7,), (10,), (98765,), (-5,)],
       "The absolute value modulo 10 is the last digit."),
    _t("celsius_to_fahrenheit", 1, "def celsius_to_fahrenheit(c: float) -> float",
       """Convert a temperature c in degrees Celsius to degrees Fahrenheit with F = C * 9 / 5 + 32
       and return it as a float. Example: celsius_to_fahrenheit(100) returns 212.0.""",
       """
def celsius_to_fahrenheit(c: float) -> float:
    return c * 9 / 5 + 32
""",
       [(100,), (0,), (-40,), (37.5,), (-273.15,), (21.1,)],
       "Apply F = C * 9 / 5 + 32."),
    _t("count_words", 1, "def count_words(s: str) -> int",
       """Return the number of words in s, where words are separated by any amount of whitespace
       (spaces, tabs, newlines). Example: count_words("  the quick  brown fox ") returns 4.""",
       """
def count_words(s: str) -> int:
    return len(s.split())
""",
       [("  the quick  brown fox ",), ("",), ("   ",), ("one",), ("a\tb\nc",), ("x y z w v",)],
       "str.split() without arguments splits on runs of whitespace."),
    _t("square_all", 1, "def square_all(nums: list[int]) -> list[int]",
       """Return a new list with the square of every number of nums, in the same order.
       Example: square_all([1, -2, 3]) returns [1, 4, 9].""",
       """
def square_all(nums: list[int]) -> list[int]:
    return [n * n for n in nums]
""",
       [([1, -2, 3],), ([],), ([0],), ([10, 11],), ([-1, -1, 5],)],
       "A list comprehension that squares each element."),
    _t("is_leap_year", 1, "def is_leap_year(year: int) -> bool",
       """Return True if year is a leap year in the Gregorian calendar: divisible by 4, except
       years divisible by 100, which are leap years only when also divisible by 400.
       Example: is_leap_year(2024) returns True.""",
       """
def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
""",
       [(2024,), (1900,), (2000,), (2023,), (2100,), (2400,), (4,)],
       "Divisible by 4 and not by 100, unless divisible by 400."),
    _t("capitalize_words", 1, "def capitalize_words(s: str) -> str",
       """Return s with the first character of every word changed to upper case and everything
       else unchanged. Words are separated by single spaces; keep all spaces as they are.
       Example: capitalize_words("hello big world") returns "Hello Big World".""",
       """
def capitalize_words(s: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in s.split(" "))
""",
       [("hello big world",), ("",), ("a",), ("mIxEd case",), ("two  spaces",), ("3rd place",)],
       "Split on single spaces, upper-case each word's first character, join with spaces."),
    _t("mean", 1, "def mean(nums: list[float]) -> float",
       """Return the arithmetic mean of the numbers in nums as a float, or 0.0 for an empty list.
       Example: mean([1, 2, 3, 4]) returns 2.5.""",
       """
def mean(nums: list[float]) -> float:
    return sum(nums) / len(nums) if nums else 0.0
""",
       [([1, 2, 3, 4],), ([],), ([5],), ([-1, 1],), ([0.5, 0.25],), ([10, 20, 30],)],
       "Divide the sum by the length, guarding the empty list."),
    _t("has_duplicates", 1, "def has_duplicates(items: list) -> bool",
       """Return True if some value occurs more than once in the list items, else False.
       Example: has_duplicates([1, 2, 3, 2]) returns True.""",
       """
def has_duplicates(items: list) -> bool:
    return len(set(items)) != len(items)
""",
       [([1, 2, 3, 2],), ([],), ([1],), (["a", "b", "c"],), (["x", "x"],), ([1, 2, 3, 4, 5],)],
       "A set drops duplicates, so compare its size with the list's."),
    # ------------------------------------------------------------------ level 2: loops and dicts
    _t("run_length_encode", 2, "def run_length_encode(s: str) -> str",
       """Compress s by replacing every run of equal consecutive characters with the character
       followed by the length of the run. Return the empty string for empty input.
       Example: run_length_encode("aaabccdddd") returns "a3b1c2d4".""",
       """
def run_length_encode(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        out.append(s[i] + str(j - i))
        i = j
    return "".join(out)
""",
       [("aaabccdddd",), ("",), ("a",), ("abc",), ("zzzzzzzzzzzz",), ("aabbaa",)],
       "Walk the string, extend each run while the character repeats, emit char and count."),
    _t("group_anagrams", 2, "def group_anagrams(words: list[str]) -> list[list[str]]",
       """Group the words that are anagrams of each other (same letters, same counts). Return a
       list of groups; groups appear in the order of their first word in the input, and words
       keep their input order inside a group.
       Example: group_anagrams(["eat", "tea", "tan", "ate", "nat", "bat"]) returns
       [["eat", "tea", "ate"], ["tan", "nat"], ["bat"]].""",
       """
def group_anagrams(words: list[str]) -> list[list[str]]:
    groups = {}
    for w in words:
        groups.setdefault("".join(sorted(w)), []).append(w)
    return list(groups.values())
""",
       [(["eat", "tea", "tan", "ate", "nat", "bat"],), ([],), (["a"],), (["ab", "ba", "ab"],),
        (["abc", "def", "cab", "fed", "x"],), (["", ""],)],
       "Use the sorted letters as a dict key; dicts keep insertion order."),
    _t("balanced_brackets", 2, "def balanced_brackets(s: str) -> bool",
       """Return True if the brackets (), [] and {} in s are balanced and properly nested; all
       other characters are ignored. Example: balanced_brackets("a(b[c]{d})") returns True,
       balanced_brackets("(]") returns False.""",
       """
def balanced_brackets(s: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    for ch in s:
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack
""",
       [("a(b[c]{d})",), ("(]",), ("",), ("((",), ("())",), ("{[()()]}",), ("x)y(",), ("([)]",)],
       "Push opening brackets on a stack and pop a matching one at each closing bracket."),
    _t("to_roman", 2, "def to_roman(n: int) -> str",
       """Convert an integer n from 1 to 3999 to a Roman numeral using the symbols I, V, X, L, C,
       D, M and the subtractive forms IV, IX, XL, XC, CD, CM.
       Example: to_roman(1994) returns "MCMXCIV".""",
       """
def to_roman(n: int) -> str:
    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = []
    for value, sym in table:
        while n >= value:
            out.append(sym)
            n -= value
    return "".join(out)
""",
       [(1994,), (1,), (4,), (9,), (58,), (3999,), (444,)],
       "Greedily subtract the largest value from a table that includes the subtractive pairs."),
    _t("from_roman", 2, "def from_roman(s: str) -> int",
       """Convert a valid Roman numeral s (symbols I, V, X, L, C, D, M, with subtractive forms
       such as IV and CM) to its integer value. Example: from_roman("MCMXCIV") returns 1994.""",
       """
def from_roman(s: str) -> int:
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for i, ch in enumerate(s):
        v = values[ch]
        if i + 1 < len(s) and values[s[i + 1]] > v:
            total -= v
        else:
            total += v
    return total
""",
       [("MCMXCIV",), ("I",), ("IV",), ("XLII",), ("MMMCMXCIX",), ("CDXLIV",)],
       "Add each symbol's value, subtracting it when a larger symbol follows."),
    _t("word_frequencies", 2, "def word_frequencies(text: str) -> dict[str, int]",
       """Count how often each word occurs in text. Words are separated by whitespace and compared
       in lower case; strip the characters . , ! ? ; : from both ends of each word and skip words
       that become empty. Return a dict from word to count.
       Example: word_frequencies("The cat saw the dog.") returns
       {"the": 2, "cat": 1, "saw": 1, "dog": 1}.""",
       """
def word_frequencies(text: str) -> dict[str, int]:
    counts = {}
    for raw in text.split():
        w = raw.strip(".,!?;:").lower()
        if w:
            counts[w] = counts.get(w, 0) + 1
    return counts
""",
       [("The cat saw the dog.",), ("",), ("Hi! hi, HI?",), ("... !!",), ("a b a c b a",),
        ("end. End; fin",)],
       "Normalise each whitespace-separated word and count it in a dict."),
    _t("second_largest", 2, "def second_largest(nums: list[int]) -> int | None",
       """Return the second largest distinct value in nums, or None when there are fewer than two
       distinct values. Example: second_largest([4, 1, 4, 3]) returns 3.""",
       """
def second_largest(nums: list[int]) -> int | None:
    distinct = sorted(set(nums))
    return distinct[-2] if len(distinct) >= 2 else None
""",
       [([4, 1, 4, 3],), ([],), ([7],), ([5, 5, 5],), ([-1, -2],), ([1, 2, 3, 10, 9],)],
       "Sort the distinct values and take the one before the last."),
    _t("flatten", 2, "def flatten(nested: list) -> list",
       """Return a flat list of all non-list items of nested, a list whose elements are items or
       further (arbitrarily deep) lists, in left-to-right order.
       Example: flatten([1, [2, [3, 4]], [], 5]) returns [1, 2, 3, 4, 5].""",
       """
def flatten(nested: list) -> list:
    out = []
    for item in nested:
        if isinstance(item, list):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out
""",
       [([1, [2, [3, 4]], [], 5],), ([],), ([[[]]],), ([[1], [2], [3]],), (["a", ["b", ["c"]]],),
        ([[[[[7]]]], 8],)],
       "Recurse into list elements and append everything else."),
    _t("caesar_shift", 2, "def caesar_shift(s: str, k: int) -> str",
       """Shift every ASCII letter of s by k positions in the alphabet, wrapping around from z to
       a and keeping its case; other characters stay the same. k may be negative or larger than
       26. Example: caesar_shift("Hello, xyz!", 3) returns "Khoor, abc!".""",
       """
def caesar_shift(s: str, k: int) -> str:
    out = []
    for ch in s:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - 97 + k) % 26 + 97))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - 65 + k) % 26 + 65))
        else:
            out.append(ch)
    return "".join(out)
""",
       [("Hello, xyz!", 3), ("", 5), ("abc", -1), ("Zebra", 26), ("Python 3", 53), ("aA", -27)],
       "Shift each letter's offset from 'a' or 'A' modulo 26."),
    _t("chunk", 2, "def chunk(items: list, size: int) -> list[list]",
       """Split items into consecutive chunks of length size (size >= 1); the last chunk may be
       shorter. Return the list of chunks (an empty list for empty input).
       Example: chunk([1, 2, 3, 4, 5], 2) returns [[1, 2], [3, 4], [5]].""",
       """
def chunk(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]
""",
       [([1, 2, 3, 4, 5], 2), ([], 3), ([1, 2, 3], 1), ([1, 2, 3], 3), ([1, 2], 5),
        (["a", "b", "c", "d"], 3)],
       "Slice the list at every multiple of size."),
    _t("most_common_char", 2, "def most_common_char(s: str) -> str",
       """Return the character that occurs most often in s; on a tie, the one that occurs first in
       s. Return the empty string for empty input. Example: most_common_char("abracadabra")
       returns "a".""",
       """
def most_common_char(s: str) -> str:
    counts = {}
    for ch in s:
        counts[ch] = counts.get(ch, 0) + 1
    best = ""
    for ch in s:
        if not best or counts[ch] > counts[best]:
            best = ch
    return best
""",
       [("abracadabra",), ("",), ("z",), ("abab",), ("bbaa",), ("mississippi",), ("  x",)],
       "Count characters, then scan in order keeping the first strictly larger count."),
    _t("pascal_row", 2, "def pascal_row(n: int) -> list[int]",
       """Return row n (counting from 0) of Pascal's triangle, the binomial coefficients
       C(n, 0) ... C(n, n). Example: pascal_row(4) returns [1, 4, 6, 4, 1].""",
       """
def pascal_row(n: int) -> list[int]:
    row = [1]
    for _ in range(n):
        row = [1] + [row[i] + row[i + 1] for i in range(len(row) - 1)] + [1]
    return row
""",
       [(4,), (0,), (1,), (2,), (10,), (20,)],
       "Build each row from the previous one by adding neighbours."),
    _t("digital_root", 2, "def digital_root(n: int) -> int",
       """Repeatedly replace the non-negative integer n by the sum of its decimal digits until a
       single digit remains, and return it. Example: digital_root(9875) returns 2
       (9+8+7+5 = 29, 2+9 = 11, 1+1 = 2).""",
       """
def digital_root(n: int) -> int:
    while n >= 10:
        n = sum(int(d) for d in str(n))
    return n
""",
       [(9875,), (0,), (7,), (10,), (999999999999,), (123456789,)],
       "Sum the digits in a loop while the number has more than one digit."),
    _t("two_sum_indices", 2, "def two_sum_indices(nums: list[int], target: int) -> tuple[int, int] | None",
       """Return a tuple (i, j) with i < j and nums[i] + nums[j] == target, choosing the smallest
       such j and then the smallest i; return None when no pair exists.
       Example: two_sum_indices([2, 7, 11, 15], 9) returns (0, 1).""",
       """
def two_sum_indices(nums: list[int], target: int) -> tuple[int, int] | None:
    first = {}
    for j, x in enumerate(nums):
        if target - x in first:
            return (first[target - x], j)
        first.setdefault(x, j)
    return None
""",
       [([2, 7, 11, 15], 9), ([], 1), ([5], 10), ([3, 3], 6), ([1, 2, 3, 4], 7), ([1, 5, 1, 5], 6),
        ([0, -1, 1], 0)],
       "Scan left to right, remembering the first index of each value seen so far."),
    # ------------------------------------------------------------------ level 3: algorithms
    _t("lis_length", 3, "def lis_length(nums: list[int]) -> int",
       """Return the length of the longest strictly increasing subsequence of nums (elements in
       their original order, not necessarily adjacent). Example: lis_length([10, 9, 2, 5, 3, 7,
       101, 18]) returns 4 (for instance 2, 3, 7, 18).""",
       """
import bisect

def lis_length(nums: list[int]) -> int:
    tails = []
    for x in nums:
        i = bisect.bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return len(tails)
""",
       [([10, 9, 2, 5, 3, 7, 101, 18],), ([],), ([5],), ([3, 3, 3],), ([1, 2, 3, 4],),
        ([4, 3, 2, 1],), ([0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15],)],
       "Keep the smallest tail of an increasing run of each length and binary-search into it."),
    _t("edit_distance", 3, "def edit_distance(a: str, b: str) -> int",
       """Return the minimum number of single-character insertions, deletions and substitutions
       needed to turn string a into string b (the Levenshtein distance).
       Example: edit_distance("kitten", "sitting") returns 3.""",
       """
def edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]
""",
       [("kitten", "sitting"), ("", ""), ("", "abc"), ("abc", ""), ("same", "same"),
        ("flaw", "lawn"), ("intention", "execution")],
       "Dynamic programming over prefixes, keeping one row of the table."),
    _t("merge_intervals", 3, "def merge_intervals(intervals: list[list[int]]) -> list[list[int]]",
       """Each interval is a list [start, end] with start <= end. Merge all intervals that overlap
       or touch (share an endpoint) and return the merged intervals sorted by start.
       Example: merge_intervals([[8, 10], [1, 3], [2, 6], [6, 7]]) returns [[1, 7], [8, 10]].""",
       """
def merge_intervals(intervals: list[list[int]]) -> list[list[int]]:
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
""",
       [([[8, 10], [1, 3], [2, 6], [6, 7]],), ([],), ([[1, 1]],), ([[1, 4], [2, 3]],),
        ([[5, 6], [1, 2], [3, 4]],), ([[1, 10], [2, 3], [11, 12], [12, 15]],)],
       "Sort by start and extend the last merged interval while the next one starts inside it."),
    _t("is_topological_order", 3,
       "def is_topological_order(n: int, edges: list[tuple[int, int]], order: list[int]) -> bool",
       """A directed graph has nodes 0..n-1 and edges (u, v) meaning u must come before v. Return
       True if order is a topological order: it contains every node exactly once and, for every
       edge (u, v), u appears before v. Example: is_topological_order(3, [(0, 1), (1, 2)],
       [0, 1, 2]) returns True.""",
       """
def is_topological_order(n: int, edges: list[tuple[int, int]], order: list[int]) -> bool:
    if sorted(order) != list(range(n)):
        return False
    pos = {node: i for i, node in enumerate(order)}
    return all(pos[u] < pos[v] for u, v in edges)
""",
       [(3, [(0, 1), (1, 2)], [0, 1, 2]), (3, [(0, 1), (1, 2)], [1, 0, 2]), (0, [], []),
        (3, [], [2, 0, 1]), (3, [(0, 1)], [0, 1]), (2, [], [0, 0]),
        (4, [(0, 1), (0, 2), (1, 3), (2, 3)], [0, 2, 1, 3])],
       "Check it is a permutation of the nodes, then compare positions along every edge."),
    _t("lcs_length", 3, "def lcs_length(a: str, b: str) -> int",
       """Return the length of the longest common subsequence of the strings a and b (characters
       in order, not necessarily adjacent). Example: lcs_length("abcde", "ace") returns 3.""",
       """
def lcs_length(a: str, b: str) -> int:
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if ca == cb else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]
""",
       [("abcde", "ace"), ("", "abc"), ("abc", "abc"), ("abc", "def"), ("AGGTAB", "GXTXAYB"),
        ("aaaa", "aa")],
       "Dynamic programming over prefixes: match extends the diagonal, else take the best neighbour."),
    _t("min_coins", 3, "def min_coins(coins: list[int], amount: int) -> int",
       """Given coin values (positive integers, unlimited supply of each), return the smallest
       number of coins that add up exactly to amount, or -1 if it cannot be done (0 coins make
       amount 0). Example: min_coins([1, 2, 5], 11) returns 3 (5 + 5 + 1).""",
       """
def min_coins(coins: list[int], amount: int) -> int:
    best = [0] + [-1] * amount
    for total in range(1, amount + 1):
        options = [best[total - c] for c in coins if c <= total and best[total - c] >= 0]
        best[total] = min(options) + 1 if options else -1
    return best[amount]
""",
       [([1, 2, 5], 11), ([2], 3), ([1], 0), ([3, 7], 5), ([1, 3, 4], 6), ([5, 10, 25], 30),
        ([2, 5, 10], 27)],
       "Dynamic programming: the best count for each total from the best counts of smaller totals."),
    _t("count_islands", 3, "def count_islands(grid: list[str]) -> int",
       """grid is a list of equal-length strings of '1' (land) and '0' (water). An island is a
       group of land cells connected horizontally or vertically. Return the number of islands.
       Example: count_islands(["110", "010", "001"]) returns 2.""",
       """
def count_islands(grid: list[str]) -> int:
    rows = len(grid)
    cols = len(grid[0]) if rows else 0
    seen = set()
    count = 0
    for r in range(rows):
        for c in range(cols):
            if grid[r][c] == "1" and (r, c) not in seen:
                count += 1
                stack = [(r, c)]
                seen.add((r, c))
                while stack:
                    y, x = stack.pop()
                    for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                        if 0 <= ny < rows and 0 <= nx < cols and grid[ny][nx] == "1" and (ny, nx) not in seen:
                            seen.add((ny, nx))
                            stack.append((ny, nx))
    return count
""",
       [(["110", "010", "001"],), ([],), (["0"],), (["1"],), (["101", "010", "101"],),
        (["1111", "1001", "1111"],), (["10", "01", "10"],)],
       "Flood-fill each unvisited land cell with a stack and count the fills."),
    _t("shortest_path_length", 3,
       "def shortest_path_length(n: int, edges: list[tuple[int, int]], src: int, dst: int) -> int",
       """An undirected graph has nodes 0..n-1 and the given edges. Return the number of edges on
       a shortest path from src to dst, 0 if src == dst, or -1 if dst cannot be reached.
       Example: shortest_path_length(4, [(0, 1), (1, 2), (2, 3), (0, 3)], 0, 2) returns 2.""",
       """
from collections import deque

def shortest_path_length(n: int, edges: list[tuple[int, int]], src: int, dst: int) -> int:
    adj = [[] for _ in range(n)]
    for u, v in edges:
        adj[u].append(v)
        adj[v].append(u)
    dist = {src: 0}
    queue = deque([src])
    while queue:
        u = queue.popleft()
        if u == dst:
            return dist[u]
        for v in adj[u]:
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return -1
""",
       [(4, [(0, 1), (1, 2), (2, 3), (0, 3)], 0, 2), (1, [], 0, 0), (3, [(0, 1)], 0, 2),
        (5, [(0, 1), (1, 2), (2, 3), (3, 4)], 4, 0), (4, [(0, 1), (0, 2), (1, 3), (2, 3)], 0, 3),
        (3, [(1, 2)], 2, 1)],
       "Breadth-first search from src; the first time dst is reached its distance is minimal."),
    _t("max_subarray_sum", 3, "def max_subarray_sum(nums: list[int]) -> int",
       """Return the largest sum of a non-empty run of consecutive elements of nums (nums has at
       least one element). Example: max_subarray_sum([-2, 1, -3, 4, -1, 2, 1, -5, 4]) returns 6
       (from 4, -1, 2, 1).""",
       """
def max_subarray_sum(nums: list[int]) -> int:
    best = cur = nums[0]
    for x in nums[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    return best
""",
       [([-2, 1, -3, 4, -1, 2, 1, -5, 4],), ([5],), ([-3, -1, -2],), ([1, 2, 3],), ([2, -1, 2],),
        ([0, -1, 0],)],
       "Kadane: the best run ending here either extends the previous one or starts anew."),
    _t("count_n_queens", 3, "def count_n_queens(n: int) -> int",
       """Return the number of ways to place n queens on an n x n chess board so that no two
       attack each other (no shared row, column or diagonal); n is between 0 and 8, and the empty
       board counts as one way for n = 0. Example: count_n_queens(4) returns 2.""",
       """
def count_n_queens(n: int) -> int:
    def place(row, cols, diag1, diag2):
        if row == n:
            return 1
        total = 0
        for c in range(n):
            if c not in cols and row - c not in diag1 and row + c not in diag2:
                total += place(row + 1, cols | {c}, diag1 | {row - c}, diag2 | {row + c})
        return total
    return place(0, frozenset(), frozenset(), frozenset())
""",
       [(4,), (0,), (1,), (2,), (3,), (6,), (8,)],
       "Backtrack row by row, tracking used columns and both diagonals."),
    _t("word_break", 3, "def word_break(s: str, words: list[str]) -> bool",
       """Return True if s can be split into a sequence of one or more words from the list words
       (each word may be used any number of times), else False; the empty string counts as
       splittable. Example: word_break("applepenapple", ["apple", "pen"]) returns True.""",
       """
def word_break(s: str, words: list[str]) -> bool:
    ok = [True] + [False] * len(s)
    for end in range(1, len(s) + 1):
        ok[end] = any(ok[end - len(w)] and s.startswith(w, end - len(w))
                      for w in words if 0 < len(w) <= end)
    return ok[len(s)]
""",
       [("applepenapple", ["apple", "pen"]), ("", ["a"]), ("catsandog", ["cats", "dog", "sand", "and", "cat"]),
        ("aaaaaaa", ["aaaa", "aaa"]), ("ab", []), ("leetcode", ["leet", "code"]),
        ("aaab", ["a", "aa"])],
       "Dynamic programming: a prefix is splittable if a word ends it after a splittable prefix."),
    _t("dijkstra_distances", 3,
       "def dijkstra_distances(n: int, edges: list[tuple[int, int, int]], src: int) -> list[int]",
       """A directed graph has nodes 0..n-1 and edges (u, v, w) from u to v with non-negative
       weight w. Return a list whose entry i is the smallest total weight of a path from src to
       node i, or -1 if node i is unreachable (entry src is 0).
       Example: dijkstra_distances(3, [(0, 1, 4), (0, 2, 1), (2, 1, 2)], 0) returns [0, 3, 1].""",
       """
import heapq

def dijkstra_distances(n: int, edges: list[tuple[int, int, int]], src: int) -> list[int]:
    adj = [[] for _ in range(n)]
    for u, v, w in edges:
        adj[u].append((v, w))
    dist = [-1] * n
    heap = [(0, src)]
    while heap:
        d, u = heapq.heappop(heap)
        if dist[u] != -1:
            continue
        dist[u] = d
        for v, w in adj[u]:
            if dist[v] == -1:
                heapq.heappush(heap, (d + w, v))
    return dist
""",
       [(3, [(0, 1, 4), (0, 2, 1), (2, 1, 2)], 0), (1, [], 0), (3, [(1, 2, 5)], 0),
        (4, [(0, 1, 1), (1, 2, 1), (0, 2, 5), (2, 3, 0)], 0), (3, [(0, 1, 2), (1, 0, 2)], 1),
        (4, [(3, 2, 1), (2, 1, 1), (1, 0, 1), (3, 0, 10)], 3)],
       "Pop the closest unsettled node from a heap and relax its outgoing edges."),
    _t("longest_palindrome", 3, "def longest_palindrome(s: str) -> str",
       """Return the longest substring of s (contiguous) that reads the same forwards and
       backwards; if several have the maximum length, return the one that starts first. Return
       the empty string for empty input. Example: longest_palindrome("babad") returns "bab".""",
       """
def longest_palindrome(s: str) -> str:
    best = ""
    for center in range(2 * len(s) - 1):
        lo, hi = center // 2, (center + 1) // 2
        while lo >= 0 and hi < len(s) and s[lo] == s[hi]:
            lo -= 1
            hi += 1
        if hi - lo - 1 > len(best):  # later centres of equal length start later
            best = s[lo + 1:hi]
    return best
""",
       [("babad",), ("",), ("a",), ("cbbd",), ("abacdfgdcaba",), ("forgeeksskeegfor",), ("abcd",)],
       "Expand around each of the 2n-1 centres and keep the longest (earliest on ties)."),
    _t("spiral_order", 3, "def spiral_order(matrix: list[list[int]]) -> list[int]",
       """Return the elements of the rectangular matrix (a list of equal-length rows) in
       clockwise spiral order, starting at the top-left corner and going right first.
       Example: spiral_order([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) returns
       [1, 2, 3, 6, 9, 8, 7, 4, 5].""",
       """
def spiral_order(matrix: list[list[int]]) -> list[int]:
    out = []
    top, bottom = 0, len(matrix) - 1
    left, right = 0, (len(matrix[0]) - 1) if matrix else -1
    while top <= bottom and left <= right:
        out.extend(matrix[top][c] for c in range(left, right + 1))
        out.extend(matrix[r][right] for r in range(top + 1, bottom + 1))
        if top < bottom:
            out.extend(matrix[bottom][c] for c in range(right - 1, left - 1, -1))
        if left < right:
            out.extend(matrix[r][left] for r in range(bottom - 1, top, -1))
        top, bottom, left, right = top + 1, bottom - 1, left + 1, right - 1
    return out
""",
       [([[1, 2, 3], [4, 5, 6], [7, 8, 9]],), ([],), ([[1]],), ([[1, 2, 3, 4]],),
        ([[1], [2], [3]],), ([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],), ([[1, 2], [3, 4]],)],
       "Walk the outer ring (top, right, bottom, left) and shrink the bounds."),
)


def tasks_for(difficulty: int | None) -> tuple[CodeTask, ...]:
    """The tasks of one level (1..3), or all of them for None."""
    if difficulty is None:
        return TASKS
    return tuple(t for t in TASKS if t.difficulty == difficulty)
