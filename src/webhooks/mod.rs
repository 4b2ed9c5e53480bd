//! Webhooks: the event catalogue, subscriptions, signing, URL safety and the dispatcher that
//! turns outbox events into signed deliveries.
