"""One renderer for a conversation: a typed view model (``conversation``) that
``show``, ``export`` and the web view all draw from, and its HTML
(``html``) and Markdown (``markdown``) renderings.

Why one package: a surface that walks the transcript's messages itself gets
its own subset of the harness markup, the tool pairing and the bookkeeping
wrong. Here the walk happens once; the renderers only draw.
"""
