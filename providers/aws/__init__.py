"""The AWS EC2 provider: ``karpenter.k8s.aws/v1`` EC2NodeClass, selector resolution, CreateFleet launches."""
