"""The PostgreSQL stores: connection pool, schema and migrations, keyword and vector indexes."""
