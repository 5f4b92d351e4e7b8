"""Several nodes on one machine: network + UTS namespaces joined by shaped veth links through a bridge
(`netns`), the settings they were made with (`spec`), and `nsrun`, which starts one command on each node the
way srun does on a cluster."""
