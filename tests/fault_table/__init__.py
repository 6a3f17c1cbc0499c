"""The fault table: every command and option of `tinykit`, fed what an unlucky user or a hostile
input gives it, ends in its documented exit code and exactly one stderr line (no traceback, never
70), and leaves the disk as it was.

- `table.py`: the Row type and the one runner every row goes through.
- `rows_make.py`, `rows_data.py`, `rows_run.py`: the rows, by command.
- `conftest.py`: the broken inputs they are fed (built once per module).
- `test_rows.py`: every row; `test_coverage.py`: every command and option has a row.
- `test_processes.py`: signals, timeouts, concurrent writers, real processes.
- `test_readers.py`: random bytes and truncations of every file format tinykit reads.
"""
