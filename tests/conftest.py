from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite the expected outputs of fixtures from the current behaviour (review the diff)",
    )
