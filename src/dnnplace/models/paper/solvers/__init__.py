"""The paper's methods: the DP over ideals, the IPs, the baselines."""
