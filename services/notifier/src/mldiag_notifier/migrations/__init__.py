"""SQL migrations of the notifier (runs read model, channels, rules, deliveries)."""
