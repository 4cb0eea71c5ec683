"""kafkagate."""
