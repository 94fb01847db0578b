"""amnet.vis: vector, indexed and strided put/get with aggregation (DESIGN.md section 9).

Built by the VIS issue, on top of the core's put/get and AM Medium/Long.
"""
