"""Checks /app/error_count.txt against the logs, as the test_outputs.py of Terminal-Bench tasks do."""
import pathlib
import sys

expected = sum("ERROR" in line for path in pathlib.Path("/app/logs").glob("*.log") for line in path.read_text().splitlines())
target = pathlib.Path("/app/error_count.txt")
if not target.is_file():
    sys.exit("error_count.txt is missing")
if target.read_text().strip() != str(expected):
    sys.exit(f"error_count.txt says {target.read_text().strip()!r}, expected {expected}")
print("ok")
