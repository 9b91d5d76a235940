"""The app's pages, run by st.navigation in app.py.

Not named `pages/`: Streamlit treats a `pages/` folder next to the entry point as an old-style
multipage app and would run those files directly, without app.py's st.navigation.
"""
