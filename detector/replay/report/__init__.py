"""detector.replay.report"""
