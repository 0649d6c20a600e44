"""The report page: a plan's candidates or a run's curves as one self-contained HTML file (docs/running.md, "Report").

- plan_data.py: what a plan's page shows, from the search's Plans (memory, step time, ranks, fates, sources).
- run_data.py: what a run's page shows, from its plan.json, metrics.jsonl rows and run_summary.json.
- figures.py: the plotly charts of either.
- page.py: the HTML file, plotly inline, the data embedded as JSON; written atomically.

plotly is the optional `report` extra; page.require_plotly says how to install it.
"""
