"""ember.Store: the key-value store over _ember.Db."""
class Store: pass
