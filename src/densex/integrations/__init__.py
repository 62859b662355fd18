"""Adapters to other ecosystems over the search API (`densex.pipelines.search`); each needs
its optional extra (`langchain`: `langchain-core`)."""
