"""host_agent package."""
