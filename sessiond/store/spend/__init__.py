"""Tokens and dollars spent: what each session's API responses used and cost.

Not the bytes on disk (that is ``store.usage``, ``sessiond du``): this package
counts model tokens (input, output, cache creation, cache read) and prices
them, by ccusage's rules (``charges``), with a shipped price table
(``prices``), into daily, monthly, session and 5-hour block reports
(``reports``). Pure: the CLI runs it over the files when no daemon runs.
"""
