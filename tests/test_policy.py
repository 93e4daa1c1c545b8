"""Every policy of the vocabulary, from verdicts sorted by C."""

from __future__ import annotations

import pytest

from findings.derive.analysis import LOSS, TIE, WIN, policy


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([(1, WIN), (10, TIE), (100, WIN)], ("always-on", None)),
        ([(1, WIN)], ("always-on", None)),
        ([(1, LOSS), (10, TIE), (100, LOSS)], ("off", None)),
        ([(1, TIE), (10, TIE)], ("no-difference", None)),
        # wins at low C, losses at high C: on while C <= last C before the first loss
        ([(1, WIN), (2, WIN), (5, TIE), (10, LOSS), (30, LOSS)], ("on-below", 5)),
        ([(1, WIN), (10, LOSS)], ("on-below", 1)),
        # the mirror image: on from the first C after the last loss
        ([(1, LOSS), (30, WIN), (100, TIE), (250, TIE)], ("on-above", 30)),
        ([(1, LOSS), (2, LOSS), (5, TIE), (10, WIN)], ("on-above", 5)),
        # interleaved wins and losses
        ([(1, WIN), (10, LOSS), (100, WIN)], ("inconclusive", None)),
        ([(1, LOSS), (10, WIN), (100, LOSS)], ("inconclusive", None)),
        ([], ("inconclusive", None)),
    ],
)
def test_policy(verdicts: list[tuple[int, str]], expected: tuple[str, int | None]) -> None:
    assert policy(verdicts) == expected
