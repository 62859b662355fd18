"""`serve.py`: the search service, explorer page and sweep browser over cached indexes.

`specs.ServeSpec` (the `serve` config group) -> `run.run` opens the indexes through the search
API (`pipelines.search`) and serves `app.create_app` with uvicorn; `batcher.MicroBatcher` joins
the queries of concurrent requests into one encoder call; `requests` validates the inputs
(every bad one a 4xx with a one-line reason); `pages` renders the explorer, `sweep_data` reads
a finished sweep for the sweep browser.
"""
