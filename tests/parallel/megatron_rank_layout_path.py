"""Makes tests/parallel importable from the tests run with PYTHONPATH=tests."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
