"""tests/storage: every test may reach 127.0.0.1 only (the S3 fixtures are tests/s3.py's, in tests/conftest.py)."""
import pytest


@pytest.fixture(autouse=True)
def _localhost_only(localhost_only):
    """See tests/s3.py's ``localhost_only``."""
