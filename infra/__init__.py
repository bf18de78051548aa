"""Starting real services and labs: Kafka (``infra/kafka``) and the netns fabric lab (:mod:`infra.lab`)."""
