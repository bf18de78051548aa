"""Stream analytics (pure functions over Arrow tables) and the Faust app that wires them to topics."""
