"""generation"""
