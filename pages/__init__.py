"""The app's pages, listed and run by st.navigation in app.py (PAGES); the package `widgets/` holds
their shared Streamlit widgets, one module per concern (Streamlit lists only the .py files directly here).

Streamlit ignores unlisted files here once st.navigation has run in the process. Before that (a fresh
server, every AppTest run) it treats this folder as an old-style multipage app and would run a page opened
by its URL on its own; every page therefore starts with `widgets.page.through_app()`, which runs app.py then.
"""
