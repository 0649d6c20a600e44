"""Speed: how fast our own code runs (the estimators, the strategy search, the data pipeline).

memory_speed.py and throughput_speed.py time the estimators the search calls thousands of times,
planner_speed.py the search (also by cluster size), `plan` and `--help`, data_pipeline.py the tokenizer and batch
feed against the tokens/s training consumes. See docs/performance.md.
"""
