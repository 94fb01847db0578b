"""amnet.core: the endpoint, bootstrap collectives and (next) the AM core and extended API."""
