"""The quality simulator: ground truth, scenarios, policies and the event loop."""
