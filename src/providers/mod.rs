//! Messaging providers: one adapter per channel type behind one trait.
