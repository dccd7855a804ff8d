"""detector.scorers.kernels"""
