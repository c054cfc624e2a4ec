"""E2: KPM subscriptions through the Subscription Manager, E2AP/E2SM-KPM decoding, and the
mapping of what the RAN reports (per cell, per UE) onto CPEs and the model's features."""
