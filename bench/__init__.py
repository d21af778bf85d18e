"""kcoord's benchmark suite: `python -m bench [codec|apiversions|produce_fetch|offset_commit|load]`.

Results go to bench/results/<name>.md (tables) and <name>.json (raw
figures); timings are never asserted in tests.
"""
