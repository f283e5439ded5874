"""The networks (models) and their convolutions."""
