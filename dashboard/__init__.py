"""fedsim's Streamlit dashboard: a read-only, live view of the run store."""
