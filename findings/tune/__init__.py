"""findings tune: search serving configs."""
