"""The profiling reconciler (`reconciler`): getting a table (trigger → run → publish)."""
