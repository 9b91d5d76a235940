"""What the pages share, one module per concern (not pages: Streamlit lists only the .py files directly in pages/,
so a helper here never shows in the sidebar, not even for the moment before `st.navigation` runs)."""
