-- Each worker node's GPU model (issue 36, GPU models), from Ray's accelerator_type:<model>
-- resource as CapacityObserved carries it; '' where the node has none. The cluster
-- projection's version moved to 2: it is rebuilt on open.
ALTER TABLE cluster_nodes ADD COLUMN gpu_type TEXT NOT NULL DEFAULT '';
