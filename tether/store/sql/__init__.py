"""The SQL store: `SQLStore` (store.py) over a `Dialect` (dialect.py) for each database it runs on."""
