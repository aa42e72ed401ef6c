"""criterions"""
