"""detector.ingest.dumps"""
