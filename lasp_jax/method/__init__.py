"""The methods and their mathematics: losses, mask search, salience, gradient modulation, look-ahead, replay memory."""
