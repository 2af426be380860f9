"""Graph model, generators and file formats."""
