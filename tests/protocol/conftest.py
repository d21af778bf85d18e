"""Shared pytest configuration for the protocol tests."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "coverage_check: the registry coverage check (fails until every expected "
        "API/version range and standalone schema is defined)")
