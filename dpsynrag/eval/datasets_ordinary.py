"""Benchmark data whose answers are ordinary words: real conditions and invented film titles.

The clinic and support sets of :mod:`dpsynrag.eval.datasets` answer with invented tokens, which
a filter can pick out by spelling alone. The two sets here answer with ordinary vocabulary:

* ``conditions``: doctor notes about 40 real, common conditions with everyday names (many
  multi-word, some capitalised or with digits: "urinary tract infection", "Lyme disease",
  "type 2 diabetes", "COVID-19"). Symptoms and treatments are written from general public
  medical knowledge, in this module's own words. Privacy unit: the patient
  (``unit`` = ``patient-<k>``), one note each, named uniquely.
* ``films``: viewers' notes about 40 invented film titles made of ordinary English words
  ("The Silent Harbor", "Seven Winters", "Blue Horizon 2"), each with a genre, three plot
  elements and a director. Privacy unit: the viewer (``unit`` = ``viewer-<k>``).

Generation rules (deterministic from ``seed`` through ``numpy.random.default_rng``):

* Frequencies are Zipf-like: the answer of rank r (1 = most common) has weight
  ``1 / (r + ZIPF_OFFSET) ** ZIPF_EXPONENT``; counts are the largest-remainder rounding of
  ``n_notes`` times the weights, then every answer is raised to :func:`min_notes` (about 15
  at 4,000 notes) by taking notes from the most frequent ones. At 4,000 notes the counts run
  from 15 to about 525. Ranks are assigned to answers by a seeded shuffle.
* Notes fill one of at least 8 templates that phrase the roles differently; symptom or plot
  order is shuffled per note. Answers stay in their natural case mid-sentence ("influenza",
  "Lyme disease"), so each note holds its answer verbatim, and no note holds another answer.
* Queries (one per answer that has notes, or ``n_queries`` cycling over them with other
  paraphrases, order and template per cycle) describe the symptoms or plot with lay
  paraphrases. Each paraphrase shares no word with its answer (words lowercased, possessive
  "'s" and a plural "s" dropped), and the whole question shares no word with its answer and
  contains no answer at all: checked in code, generation fails otherwise.
* Film titles come from word lists; every token is an English word (english-words, plurals
  allowed) or a number, titles are unique and none contains another.
* ``templates`` picks the note and query templates: ``None`` or ``"dev"`` (the default) the
  built-in development set of the kind (:data:`BUILTIN_TEMPLATES`, the set to tune on), else
  the path of a TOML file of templates or of a folder holding ``<kind>.toml``
  (:mod:`dpsynrag.eval.template_files`; the sets of past measurements lie outside the
  package, in the repository's ``benchmarks/sets/``). A dataset records which in
  ``templates``: ``"dev"`` or the file's path as given.
* Person names (patients, viewers, doctors, directors, askers) are unique across a dataset.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsynrag.eval.datasets import (
    QAItem,
    _english_or_plural,
    _format_date,
    _join,
    _Names,
)
from dpsynrag.eval.metrics import contains_answer
from dpsynrag.eval.template_files import load_template_set, template_file
from dpsynrag.eval.template_set import TemplateSet

__all__ = [
    "BUILTIN_TEMPLATES",
    "CONDITIONS",
    "CONDITION_TEMPLATES",
    "DEV_TEMPLATES",
    "FILM_TEMPLATES",
    "ORDINARY_KINDS",
    "PLOT_ELEMENTS",
    "Condition",
    "ConditionsDataset",
    "Film",
    "FilmsDataset",
    "OrdinaryNote",
    "TemplateSet",
    "make_conditions_dataset",
    "make_films_dataset",
    "make_ordinary_dataset",
    "min_notes",
    "resolve_templates",
    "save_dataset",
    "shared_words",
    "write_conditions_dataset",
    "write_films_dataset",
    "zipf_counts",
]

ORDINARY_KINDS = ("conditions", "films")
#: The name of the built-in template set (a dataset's ``templates`` when made with it).
DEV_TEMPLATES = "dev"
ZIPF_OFFSET = 10.0
ZIPF_EXPONENT = 2.35
N_DOCTORS = 8
N_DIRECTORS = 10

# ------------------------------------------------------------------ conditions
# (name as written in notes, treatment, ("clinical phrase|lay paraphrase|lay paraphrase", ...))
_CONDITION_TABLE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("influenza", "oseltamivir", (
        "sudden high fever|a temperature that shot up out of nowhere|burning up all of a sudden",
        "aching muscles all over|every part of my body feeling bruised|limbs that ache badly",
        "extreme fatigue|being too wiped out to leave bed|total exhaustion after an hour awake",
        "dry cough|a hacking that brings nothing up|a tickly chest that makes me splutter")),
    ("urinary tract infection", "nitrofurantoin", (
        "burning pain on urination|a stinging feeling when I pee|it hurting every time I wee",
        "frequent urge to urinate|needing the loo every half hour|constantly rushing to pee",
        "cloudy urine|pee that looks murky|wee coming out hazy instead of clear",
        "lower abdominal discomfort|a dull ache low in my belly|soreness above my pubic bone")),
    ("acid reflux", "omeprazole", (
        "heartburn after meals|a burning behind my breastbone after eating|a hot feeling "
        "rising up my chest after dinner",
        "sour taste in the mouth|a bitter tang on my tongue|a vinegary flavour in my gullet",
        "regurgitation when lying down|food coming back up when I go to bed|my dinner "
        "creeping up my gullet at night")),
    ("type 2 diabetes", "metformin", (
        "excessive thirst|being parched however much water I drink|craving drinks all day",
        "frequent urination at night|getting up several times after dark to pee|waking again "
        "and again needing a wee",
        "slow-healing cuts|small wounds that take weeks to close|scratches that won't mend",
        "blurred vision|things looking fuzzy when I read|my eyesight going soft")),
    ("hay fever", "cetirizine", (
        "sneezing fits in spring|bursts of sneezing whenever pollen is about|a sneezy nose "
        "every time grass is cut",
        "itchy watery eyes|eyes that stream and itch outdoors|constantly rubbing teary eyes",
        "blocked nose|a stuffed-up nose|not being able to breathe through my nostrils")),
    ("kidney stones", "tamsulosin", (
        "severe flank pain radiating to the groin|a stabbing pain in my side shooting down to "
        "my groin|agony in my lower back spreading to my crotch",
        "blood in the urine|reddish pee|wee turning a rusty colour",
        "nausea with waves of pain|feeling sick as cramps come and go|pain in waves that "
        "makes me want to throw up")),
    ("Lyme disease", "doxycycline", (
        "expanding bull's-eye rash|a red ring on my skin that keeps getting bigger|a "
        "target-shaped mark spreading out from a tick bite",
        "joint pain that moves around|aches hopping from one knee to another|sore joints "
        "that change place every few days",
        "fever and chills after a hike|running hot and cold since a walk in the woods|"
        "shivering with a temperature after hiking in tall grass")),
    ("Bell's palsy", "prednisolone", (
        "sudden drooping of one side of the face|half of my face sagging overnight|one side "
        "of my mouth hanging down since this morning",
        "inability to close one eye|not being able to shut one eyelid|one eye that stays open "
        "when I blink",
        "loss of taste on the front of the tongue|food tasting of nothing on the tip of my "
        "tongue|my tongue no longer picking up flavours")),
    ("strep throat", "penicillin V", (
        "severe sore throat|swallowing that feels like razor blades|a raw burning pain when "
        "I gulp",
        "white patches on the tonsils|white spots at the back of my mouth|pus-coloured blobs "
        "behind my tongue",
        "tender swollen neck glands|lumps under my jaw that hurt to touch|swollen sore glands "
        "in my neck",
        "fever without cough|a temperature but no coughing at all|running hot though I'm not "
        "coughing")),
    ("pink eye", "chloramphenicol drops", (
        "red sticky eye discharge|gunk that glues my lashes together|a bloodshot look with "
        "yellow crust",
        "gritty feeling under the eyelid|something like sand under my lids|a scratchy "
        "sensation each time I blink",
        "watering and light sensitivity|tears streaming when I go out in sunshine|squinting "
        "and weeping in bright rooms")),
    ("shingles", "valaciclovir", (
        "painful blistering rash on one side of the torso|a band of blisters round one side "
        "of my ribs|a stripe of painful spots across half my chest",
        "burning skin before the rash|my skin stinging days before anything showed|a hot "
        "prickly patch that came before the spots",
        "pain at the lightest touch|even my shirt brushing that area hurts|agony when "
        "anything grazes that patch")),
    ("gout", "colchicine", (
        "sudden severe pain in the big toe|my big toe throbbing in agony overnight|waking up "
        "with my largest toe on fire",
        "hot swollen red joint|a puffy hot knuckle on my foot|a toe joint looking red and "
        "swollen",
        "attacks after alcohol or red meat|flare-ups after an evening of beer|agony that "
        "comes on after steak and wine")),
    ("asthma", "a salbutamol inhaler", (
        "wheezing|a whistling sound when I breathe out|my chest making a squeaky noise",
        "shortness of breath during exercise|getting winded jogging short distances|running "
        "out of puff after a few stairs",
        "night-time cough|coughing mostly when I lie down at night|a cough that keeps me up "
        "after midnight",
        "chest tightness|a band squeezing round my ribs|feeling like my lungs can't fill up")),
    ("migraine", "sumatriptan", (
        "throbbing one-sided headache|a pounding pain on one side of my head|a pulsing ache "
        "behind one temple",
        "sensitivity to light|needing to lie in a dark room|bright screens feeling unbearable",
        "visual aura before the pain|zigzag lines in my vision before it starts|shimmering "
        "spots I see beforehand",
        "nausea with vomiting|feeling queasy and throwing up|being sick with the ache")),
    ("tennis elbow", "ibuprofen gel", (
        "pain on the outer side of the elbow|soreness on the outside of my arm joint|an ache "
        "at the bony bump outside my forearm",
        "weak grip|trouble holding a cup of coffee|dropping things because my grip is feeble",
        "pain when twisting the forearm|it hurting to turn a door handle|agony when I wring "
        "out a cloth")),
    ("carpal tunnel syndrome", "a wrist splint", (
        "numbness in the thumb and first fingers|pins and needles in my thumb and index "
        "finger|my first three fingers going dead",
        "symptoms waking the patient at night|waking up with my hand asleep|shaking my hand "
        "out in the night to get feeling back",
        "weakness of the hand|fumbling buttons and jar lids|dropping small things like keys")),
    ("iron deficiency anemia", "ferrous sulfate", (
        "pale skin|looking washed out and colourless|people saying I look ghostly white",
        "tiredness and lack of energy|being worn out all the time|running on empty after a "
        "full night in bed",
        "brittle spoon-shaped nails|nails curving up like little dishes|nails that crack and "
        "dip in the middle",
        "craving to chew ice|wanting to crunch ice cubes constantly|an urge to chomp on "
        "frozen cubes")),
    ("sinus infection", "co-amoxiclav", (
        "facial pain around the cheeks and forehead|pressure behind my cheekbones and brow|an "
        "ache across my face that's worse when I bend forward",
        "thick yellow nasal discharge|green-yellow gunk when I blow my nose|a runny nose with "
        "thick coloured mucus",
        "reduced sense of smell|not smelling my coffee any more|my nose picking up hardly any "
        "scents")),
    ("ear infection", "amoxicillin", (
        "earache|a sharp pain deep in the side of my head|a throbbing ache that gets worse "
        "when I lie on that side",
        "muffled hearing|sounds seeming dull and far away|everything sounding like I'm "
        "underwater",
        "fluid draining from the ear canal|yellow liquid leaking onto my pillow|a damp smelly "
        "discharge on my pillow in the morning")),
    ("pneumonia", "clarithromycin", (
        "fever with shaking chills|shivering so hard my teeth chatter|violent shivers and a "
        "high temperature",
        "sharp chest pain on inspiration|a stabbing feeling every time I take a deep breath|it "
        "hurting to breathe in fully",
        "cough with rust-coloured sputum|coughing up brownish-red phlegm|a cough producing "
        "rusty spit",
        "rapid breathing|panting even at rest|taking quick shallow breaths all the time")),
    ("chickenpox", "calamine lotion", (
        "itchy spots that turn into blisters|little red bumps that fill with fluid|spots that "
        "become tiny water blisters",
        "rash starting on the chest and back|blotches that began on my tummy and spread|spots "
        "popping up first on my trunk",
        "mild fever and tiredness|feeling a bit hot and run down|a slight temperature and no "
        "energy")),
    ("plantar fasciitis", "heel stretches and cushioned insoles", (
        "heel pain with the first steps in the morning|a stabbing in my heel when I get out of "
        "bed|my first few steps each morning being agony",
        "pain after standing for long periods|my foot aching after a long shift|sore soles "
        "after a day on my feet",
        "tenderness under the heel|a sore spot on the bottom of my heel|it hurting to press "
        "under my heel")),
    ("irritable bowel syndrome", "mebeverine", (
        "cramping abdominal pain eased by defecation|tummy cramps that ease after I go to the "
        "toilet|belly pain that settles once I've been",
        "bloating|a swollen gassy belly|feeling puffed up like a balloon",
        "alternating diarrhoea and constipation|swinging between runny stools and being "
        "blocked up|going from loose to stuck and back again")),
    ("psoriasis", "calcipotriol ointment", (
        "thick red plaques with silvery scales|raised patches covered in silver flakes|scaly "
        "crusty patches on my elbows and knees",
        "itchy flaking scalp|a flaky itchy head of hair|white flakes from my scalp that aren't "
        "dandruff",
        "pitted nails|tiny dents in my fingernails|nails with little pinprick holes")),
    ("eczema", "hydrocortisone cream", (
        "dry itchy skin in the flexures|itchy dry patches inside my elbows and behind my knees"
        "|rough itchy skin in the creases of my arms",
        "red inflamed patches that weep|angry sore skin that oozes|raw patches that get wet "
        "and crusty",
        "skin thickening from scratching|leathery skin where I keep scratching|rough thick "
        "spots from rubbing")),
    ("hypothyroidism", "levothyroxine", (
        "feeling cold all the time|always needing a jumper when others are warm|never being "
        "able to warm up",
        "weight gain without eating more|putting on pounds though I eat the same|my weight "
        "creeping up for no reason",
        "constipation|not going to the toilet for days|hard stools only once a week",
        "dry skin and thinning hair|my hair falling out and skin like paper|brittle hair and "
        "flaky skin")),
    ("high blood pressure", "amlodipine", (
        "readings above 140/90 on repeated checks|the cuff at the chemist giving worrying "
        "numbers|a home monitor showing readings well over normal",
        "headaches at the back of the head|a dull ache at the base of my skull|a heavy "
        "feeling at the back of my skull",
        "occasional nosebleeds|my nose bleeding for no reason|drips of red from my nostril now "
        "and then")),
    ("food poisoning", "oral rehydration salts", (
        "vomiting within hours of a meal|throwing up a few hours after eating out|being sick "
        "soon after a takeaway",
        "watery diarrhoea|runny stools over and over|dashing to the loo with the runs",
        "stomach cramps|painful knots in my tummy|gripping belly pains")),
    ("vertigo", "betahistine", (
        "spinning sensation when turning the head|the room whirling when I roll over in bed|"
        "everything spinning as I look up",
        "loss of balance|staggering as if I'm drunk|swaying and unsteady on my feet",
        "nausea with head movement|feeling sick whenever I move my head quickly|queasiness "
        "every time I look down")),
    ("sciatica", "naproxen", (
        "pain shooting from the buttock down the leg|a sharp pain running from my bottom down "
        "my thigh|an electric jolt down one leg from my backside",
        "numbness in the foot|a dead feeling in one foot|tingling down to my toes",
        "pain worse when sitting|it hurting more after sitting in the car|sitting at my desk "
        "making the leg pain worse")),
    ("frozen shoulder", "a steroid injection and physiotherapy", (
        "severely restricted shoulder movement|not being able to lift my arm above my head|my "
        "upper arm joint seizing up",
        "pain reaching behind the back|agony when I try to tuck in a shirt|it hurting to "
        "reach into my back pocket",
        "night pain when lying on the affected side|not being able to lie on that side|waking "
        "up when I roll onto the painful side")),
    ("athlete's foot", "terbinafine cream", (
        "itchy peeling skin between the toes|flaking itchy skin between my toes|cracked skin "
        "in the gaps of my toes",
        "white soggy skin|pale wrinkly skin that looks waterlogged|soft white patches that "
        "stay damp",
        "stinging and burning on the soles|a burning itch under my feet|my soles prickling "
        "and stinging")),
    ("cold sores", "aciclovir cream", (
        "tingling on the lip before blisters appear|a prickling spot on my lip a day before "
        "anything shows|a tingle at the edge of my mouth that warns me",
        "clusters of small blisters on the lip|little watery bubbles on my lip|a crop of tiny "
        "blisters at the corner of my mouth",
        "crusting scabs around the mouth|yellowish crusts near my lips|a scab forming by my "
        "mouth")),
    ("sleep apnea", "a CPAP machine", (
        "loud snoring|snoring so loud my partner moves rooms|snores that rattle the windows",
        "pauses in breathing during sleep|my partner saying I stop breathing at night|gasping "
        "and choking awake",
        "daytime sleepiness|nodding off at my desk|feeling drowsy all day despite a full "
        "night in bed",
        "morning headaches|waking up with a dull head|a headache most mornings")),
    ("COVID-19", "nirmatrelvir with ritonavir", (
        "new loss of taste and smell|food tasting of nothing and no smells at all|suddenly not "
        "being able to smell or taste anything",
        "persistent cough|a continuous cough for days|coughing fits that don't let up",
        "fever with headache|a temperature and a splitting head|feeling feverish with a "
        "thumping head")),
    ("hepatitis B", "tenofovir", (
        "yellowing of the skin and eyes|my eyes and skin turning yellow|a yellowish tinge to "
        "the whites of my eyes",
        "dark urine|pee the colour of tea|very dark wee",
        "pain under the right ribs|an ache below my ribs on the right|tenderness in my upper "
        "right belly",
        "pale stools|clay-coloured poo|light grey motions")),
    ("celiac disease", "a strict gluten-free diet", (
        "bloating after eating bread|a swollen belly after toast or pasta|a gassy stomach "
        "whenever I eat wheat",
        "chronic diarrhoea|loose stools that go on for weeks|months of runny motions",
        "unexplained weight loss|losing weight without trying|my clothes getting baggy for no "
        "reason",
        "mouth ulcers|sore spots inside my cheeks|painful little craters in my mouth")),
    ("Raynaud's phenomenon", "nifedipine", (
        "fingers turning white in the cold|my fingertips going white then blue when it's "
        "chilly|fingers that lose all colour in winter",
        "throbbing and redness on rewarming|fingers that throb and go red when they warm up|a "
        "painful flush as my hands thaw",
        "numb fingertips in cool weather|fingertips with no feeling on chilly days|dead "
        "fingers when I hold a cold drink")),
    ("vitamin B12 deficiency", "hydroxocobalamin injections", (
        "tingling in the hands and feet|pins and needles in my fingers and toes|a prickling "
        "feeling in my feet",
        "sore red smooth tongue|a smooth swollen painful tongue|my tongue looking beefy red",
        "forgetfulness and tiredness|forgetting things and being worn out|brain fog and low "
        "energy")),
    ("Achilles tendinitis", "calf stretches and ice", (
        "pain at the back of the heel|an ache at the back of my ankle above my heel|soreness "
        "in the cord behind my ankle",
        "morning stiffness of the ankle|a stiff ankle first thing|my ankle feeling tight when "
        "I get up",
        "swelling along the tendon|a tender lump above my heel|puffiness at the back of my "
        "lower leg")),
)


def _parse_symptom(entry: str) -> tuple[str, tuple[str, str]]:
    clinical, lay1, lay2 = entry.split("|")
    return clinical, (lay1, lay2)


# (name, treatment, ((clinical phrase, (lay paraphrase, lay paraphrase)), ...))
CONDITIONS: tuple[tuple[str, str, tuple[tuple[str, tuple[str, str]], ...]], ...] = tuple(
    (name, treatment, tuple(_parse_symptom(s) for s in symptoms))
    for name, treatment, symptoms in _CONDITION_TABLE)


CONDITION_TEMPLATES = TemplateSet(notes=(
    "Patient {name}, a {age}-year-old, presented on {date} with {symptoms}. Dr. {doctor} "
    "diagnosed {condition} and started the patient on {treatment}.",
    "{date}. {name} ({age}) complains of {symptoms}. Assessment by Dr. {doctor}: {condition}. "
    "Plan: {treatment}.",
    "Dr. {doctor} examined {name}, aged {age}, on {date}. Findings of {symptoms} are consistent "
    "with {condition}; treated with {treatment}.",
    "Visit on {date}: {name}, {age}, reported {symptoms}. Diagnosis: {condition}. Dr. {doctor} "
    "prescribed {treatment}.",
    "On {date}, {name}, {age}, came in with {symptoms}. Dr. {doctor} confirmed {condition} and "
    "recommended {treatment}.",
    "Clinic note ({date}), Dr. {doctor}. {name} is a {age}-year-old with {symptoms}. "
    "Impression: {condition}. The patient was prescribed {treatment}.",
    "{name}, age {age}, seen by Dr. {doctor} on {date}. History of {symptoms}. The working "
    "diagnosis is {condition}, to be managed with {treatment}.",
    "Consultation, {date}. {name} ({age}) has been suffering from {symptoms}. Dr. {doctor} "
    "diagnosed the patient with {condition} and started {treatment}.",
), queries=(
    "I've had {symptoms}. Which condition could this be?",
    "Hello doctor, I am {asker}. Recently I have noticed {symptoms}. What might be wrong with "
    "me?",
    "For some weeks now I've been dealing with {symptoms}. What illness could explain this?",
    "I keep getting {symptoms}. What do I have?",
    "Hi, I'm {asker}. My problems are {symptoms}. Any idea what this is?",
    "What could cause {symptoms} all at once?",
))

# ------------------------------------------------------------------ films
_ADJECTIVES = (
    "Silent", "Last", "Blue", "Golden", "Quiet", "Broken", "Hidden", "Distant", "Hollow",
    "Bitter", "Crimson", "Gentle", "Lonely", "Narrow", "Northern", "Burning", "Velvet",
    "Midnight", "Paper", "Summer", "Autumn", "Silver", "Empty", "Little", "Endless",
    "Sleeping", "Scarlet", "Copper", "Glass", "Winter",
)
_NOUNS = (
    "Harbor", "Orchard", "Ferry", "Horizon", "Lantern", "River", "Garden", "Bridge", "Window",
    "Meadow", "Island", "Valley", "Tide", "Compass", "Kingdom", "Canyon", "Anchor", "Whistle",
    "Ribbon", "Promise", "Season", "Shore", "Signal", "Forest", "Highway", "Thunder",
)
_PLURALS = (
    "Winters", "Lanterns", "Shadows", "Letters", "Mirrors", "Bells", "Doors", "Summers",
    "Sparrows", "Echoes", "Roads", "Clouds", "Candles", "Horses", "Feathers", "Sisters",
)
_NUMBERS = ("Two", "Three", "Four", "Five", "Seven", "Nine", "Ten", "Twelve")
_GENRES = ("drama", "comedy", "thriller", "western", "romance", "mystery", "musical",
           "horror film", "fantasy", "crime drama", "family comedy", "war drama")

PLOT_ELEMENTS: tuple[tuple[str, tuple[str, str]], ...] = tuple(_parse_symptom(e) for e in (
    "a lighthouse keeper|a man who tends a lamp on a rocky coast|someone paid to keep a beacon "
    "burning",
    "a stolen violin|a fiddle that goes missing|an instrument snatched from a concert hall",
    "a flooded village|a hamlet swallowed by water|homes drowned after a dam bursts",
    "an old fisherman|an elderly man who catches fish for a living|a weathered sailor hauling "
    "nets",
    "a runaway bride|a woman who flees her own wedding|someone jilting a groom at an altar",
    "a haunted hotel|an inn full of ghosts|a guesthouse where spirits roam corridors",
    "a missing dog|a lost puppy|a pet hound that vanishes",
    "a bank robbery|a heist at a vault|crooks emptying a safe",
    "a chess tournament|a board-game contest between grandmasters|players battling over pawns",
    "a desert road trip|a long drive across sand dunes|travelling by car through a wasteland",
    "a twin brother|a sibling who looks exactly alike|an identical male sibling",
    "a mysterious letter|an anonymous note arriving by post|an envelope with no sender",
    "a small-town baker|a woman who runs a bread shop|someone making pastries in a village",
    "a retired boxer|a fighter who has hung up his gloves|an ex-champion of ring fights",
    "an abandoned circus|a big top left empty|clowns' tents rotting in a field",
    "a forbidden romance|lovers kept apart by their families|an affair nobody may know about",
    "a train heist|robbers on a moving locomotive|a raid on a railway carriage",
    "a deaf pianist|a musician who cannot hear|a keyboard player who lost hearing",
    "an avalanche rescue|saving climbers buried in snow|digging skiers out of a snowslide",
    "a family restaurant|a diner run by parents and kids|a kitchen where three generations cook",
    "a lost diary|a journal that goes missing|a notebook of private thoughts someone misplaces",
    "a submarine crew|sailors trapped under sea|men aboard an underwater vessel",
    "a village election|a vote for mayor in a tiny town|a local ballot that splits neighbours",
    "a wrongly accused teacher|a schoolmaster blamed for something he didn't do|an innocent "
    "instructor facing false charges",
    "a shipwreck|a vessel sinking in a storm|a boat breaking apart on rocks",
    "a stranded astronaut|a spacewalker cut off from home|someone left alone in orbit",
    "a carnival magician|a conjurer at a fairground|a trickster pulling rabbits from hats",
    "an orphan boy|a child with no parents|a young lad raised in an institution",
    "a vineyard inheritance|grapes and a winery left in a will|a wine estate passed down to "
    "a grandchild",
    "a jazz singer|a vocalist crooning in smoky clubs|a woman performing blues at night",
    "a smuggler's tunnel|an underground route for sneaking goods past guards|a passage dug "
    "for contraband",
    "a called-off wedding|a couple who cancel their marriage plans|an engagement ended at "
    "short notice",
    "a sleepwalking child|a kid who wanders at night without waking|a youngster roaming dark "
    "halls while dreaming",
    "a wolf pack|hungry wolves hunting together|a band of grey hunters stalking deer",
    "a forged painting|a fake masterpiece|a counterfeit canvas sold as genuine",
    "a dying king|an ailing monarch|a ruler on his deathbed",
    "a time traveller|someone who jumps between centuries|a visitor from a future age",
    "a radio host|a presenter on late-night airwaves|a voice broadcasting to insomniacs",
    "a cattle drive|cowboys herding cows across plains|ranch hands moving a herd",
    "a hospital night shift|nurses working until dawn|doctors on overnight duty at a clinic",
    "a stolen identity|someone living under another person's name|an impostor pretending to "
    "be somebody else",
    "a beekeeper|a woman tending hives|a man who collects honey",
    "a long-lost sister|a sibling found after decades|a relative reunited after years apart",
    "a kidnapped heiress|a rich young woman held for ransom|a millionaire's daughter snatched "
    "by crooks",
    "a snowbound cabin|a hut cut off by blizzards|a log house buried in drifts",
    "a travelling theatre troupe|actors touring in a wagon|a band of players moving from town "
    "to town",
    "a volcanic eruption|molten rock swallowing a town|ash raining down on farmers",
    "a soldier coming home|a veteran returning from war|a serviceman back from battle",
    "a marathon runner|an athlete training for a big race|a jogger chasing a personal best",
    "a mute witness|an onlooker who cannot speak|someone who saw a crime but has no voice",
    "a stolen necklace|missing jewels|a pearl chain taken from a safe",
    "an arranged marriage|a wedding set up by parents|a bride and groom who have never met",
    "a ghost ship|a vessel with no crew drifting at sea|a phantom boat",
    "a rival chef|a competing cook|a kitchen enemy",
    "a prison escape|inmates breaking out of jail|convicts digging out of a cell",
    "a message from space|strange transmissions from another planet|a broadcast from aliens",
    "a small-town sheriff|a country lawman|a police chief in a sleepy place",
    "a lottery win|a ticket worth millions|someone suddenly rich from a draw",
    "a blind photographer|a cameraman who cannot see|a picture-taker without sight",
    "a dance competition|a ballroom contest|couples competing on a polished floor",
))

FILM_TEMPLATES = TemplateSet(notes=(
    "{name} watched {title} on {date}: a {genre} about {plot}. Rated it {stars} stars.",
    "{name} recommends {title}, the {genre} where we meet {plot}. Directed by {director}.",
    "Movie night ({date}). {name} picked {title}, directed by {director}. It is a {genre} "
    "featuring {plot}. Verdict: {stars}/5.",
    "Diary of {name}, {date}. Saw {title} at the cinema. {director}'s {genre} follows {plot}. "
    "{stars} stars out of 5.",
    "{date} - {name} rewatched {title}. Still love this {genre} with {plot}. {stars} stars.",
    "Review by {name} ({date}): {title} is a {genre} by {director} about {plot}. My score: "
    "{stars} out of 5.",
    "Club log, {date}: {name} brought {title} to the film club. The {genre} centres on {plot}. "
    "Rated {stars}/5.",
    "{name} streamed {title} on {date}. A {genre} from {director} involving {plot}; worth "
    "{stars} stars.",
), queries=(
    "Which film is about {plot}?",
    "I'm trying to remember a movie with {plot}. What was it called?",
    "My name is {asker}. A friend mentioned a {genre} featuring {plot}. Which film was that?",
    "Can you name a film involving {plot}?",
    "Hi, I'm {asker}. Years ago I saw a {genre} with {plot}. Do you know its title?",
    "What movie tells a story of {plot}?",
))


#: kind -> the built-in note and query templates, the development set ``dev`` (any other set
#: is a TOML file: :mod:`dpsynrag.eval.template_files`).
BUILTIN_TEMPLATES: dict[str, TemplateSet] = {"conditions": CONDITION_TEMPLATES,
                                             "films": FILM_TEMPLATES}


# ------------------------------------------------------------------ data classes
@dataclass(frozen=True)
class Condition:
    """A real condition; ``rank`` 1 is the most frequent, ``frequency`` its Zipf share."""

    name: str
    symptoms: tuple[str, ...]
    treatment: str
    rank: int
    frequency: float
    n_notes: int


@dataclass(frozen=True)
class Film:
    """An invented film; ``plot`` holds the phrases used in notes."""

    title: str
    genre: str
    plot: tuple[str, ...]
    director: str
    rank: int
    frequency: float
    n_notes: int


@dataclass(frozen=True)
class OrdinaryNote:
    """One note (``id``, ``text``, ``unit`` go to ``notes.jsonl``); ``person`` is the unit's
    name, ``answer`` the condition or title it is about."""

    id: str
    text: str
    unit: str
    person: str
    answer: str


@dataclass(frozen=True)
class ConditionsDataset:
    """Conditions, notes and queries of one generated ``conditions`` set."""

    seed: int
    templates: str
    conditions: tuple[Condition, ...]
    notes: tuple[OrdinaryNote, ...]
    queries: tuple[QAItem, ...]
    kind: str = "conditions"

    def describe(self) -> dict[str, Any]:
        """The public description written to ``conditions.json``."""
        return {**_header(self), "n_conditions": len(self.conditions),
                "conditions": [{"name": c.name, "symptoms": list(c.symptoms),
                                "treatment": c.treatment, "rank": c.rank,
                                "frequency": c.frequency, "n_notes": c.n_notes}
                               for c in self.conditions]}


@dataclass(frozen=True)
class FilmsDataset:
    """Films, notes and queries of one generated ``films`` set."""

    seed: int
    templates: str
    films: tuple[Film, ...]
    notes: tuple[OrdinaryNote, ...]
    queries: tuple[QAItem, ...]
    kind: str = "films"

    def describe(self) -> dict[str, Any]:
        """The public description written to ``films.json``."""
        return {**_header(self), "n_films": len(self.films),
                "films": [{"title": f.title, "genre": f.genre, "plot": list(f.plot),
                           "director": f.director, "rank": f.rank, "frequency": f.frequency,
                           "n_notes": f.n_notes} for f in self.films]}


def _header(data: ConditionsDataset | FilmsDataset) -> dict[str, Any]:
    return {"generator": f"dpsynrag.eval.datasets_ordinary/{data.kind}-v1", "seed": data.seed,
            "templates": data.templates, "n_notes": len(data.notes),
            "n_queries": len(data.queries)}


# ------------------------------------------------------------------ helpers
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)*")


def _words(text: str) -> set[str]:
    """Lowercase words of ``text``, possessive "'s" and a plural "s" dropped."""
    out: set[str] = set()
    for word in _WORD.findall(text.lower().replace("\u2019", "'")):
        word = word.removesuffix("'s")
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.add(word)
    return out


def shared_words(a: str, b: str) -> set[str]:
    """The words (as compared by this module's checks) that ``a`` and ``b`` have in common."""
    return _words(a) & _words(b)


def min_notes(n_notes: int) -> int:
    """The fewest notes any answer gets: about 15 per 4,000 notes, at least 1."""
    return max(1, round(15 * n_notes / 4000))


def zipf_counts(n_notes: int, n_answers: int) -> list[int]:
    """Note counts by frequency rank (most frequent first), summing to ``n_notes``.

    Largest-remainder rounding of the weights ``1 / (r + ZIPF_OFFSET) ** ZIPF_EXPONENT``,
    then each count is raised to ``min(min_notes(n_notes), n_notes // n_answers)`` with notes
    taken from the most frequent ranks; non-increasing. With fewer notes than answers the
    first ``n_notes`` ranks get one each.
    """
    if n_notes < n_answers:
        return [1] * n_notes + [0] * (n_answers - n_notes)
    weights = [1.0 / (r + ZIPF_OFFSET) ** ZIPF_EXPONENT for r in range(1, n_answers + 1)]
    expected = [n_notes * w / sum(weights) for w in weights]
    counts = [int(e) for e in expected]
    by_remainder = sorted(range(n_answers), key=lambda r: (counts[r] - expected[r], r))
    for r in by_remainder[:n_notes - sum(counts)]:
        counts[r] += 1
    floor = min(min_notes(n_notes), n_notes // n_answers)
    for r in range(n_answers):
        while counts[r] < floor:
            top = max(counts)
            donor = max(j for j in range(n_answers) if counts[j] == top)
            counts[donor] -= 1
            counts[r] += 1
    return counts


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _check_question(question: str, answer: str, answers: Sequence[str]) -> None:
    """Raise unless ``question`` avoids its answer's string and words, and every answer."""
    if answer.lower() in question.lower() or shared_words(question, answer):
        raise RuntimeError(f"query for {answer!r} gives its answer away")
    if any(contains_answer(question, a) for a in answers):
        raise RuntimeError(f"query for {answer!r} names an answer")


def _check_conditions() -> None:
    names = [c[0] for c in CONDITIONS]
    if len(set(names)) != len(names):
        raise RuntimeError("duplicate condition names")
    clinical = [s for c in CONDITIONS for s, _ in c[2]]
    if len(set(clinical)) != len(clinical):
        raise RuntimeError("a clinical phrase is used by two conditions")
    for name, _, symptoms in CONDITIONS:
        if not 3 <= len(symptoms) <= 4:
            raise RuntimeError(f"{name}: expected 3-4 symptoms")
        for _, lay in symptoms:
            if any(shared_words(p, name) for p in lay):
                raise RuntimeError(f"{name}: a lay paraphrase shares a word with the name")


def _validate(n_notes: int, n_queries: int | None) -> None:
    if n_notes < 1:
        raise ValueError("n_notes must be positive")
    if n_queries is not None and n_queries < 0:
        raise ValueError("n_queries must be non-negative")


def _frequencies(n_notes: int, n_answers: int,
                 rng: np.random.Generator) -> tuple[list[int], list[float], list[int]]:
    """Per answer: its rank (1 = most frequent, seeded shuffle), Zipf share and note count."""
    ranks = [int(r) + 1 for r in rng.permutation(n_answers)]
    weights = [1.0 / (r + ZIPF_OFFSET) ** ZIPF_EXPONENT for r in range(1, n_answers + 1)]
    by_rank = zipf_counts(n_notes, n_answers)
    return (ranks, [weights[r - 1] / sum(weights) for r in ranks],
            [by_rank[r - 1] for r in ranks])


def _random_day(rng: np.random.Generator) -> str:
    day = _dt.date.fromordinal(_dt.date(2023, 1, 1).toordinal() + int(rng.integers(730)))
    return _format_date(day, int(rng.integers(3)))


def _make_queries(rng: np.random.Generator, people: _Names, *, answers: Sequence[str],
                  lay: Sequence[Sequence[tuple[str, str]]], fields: Sequence[dict[str, str]],
                  slot: str, by_answer: dict[int, list[str]], n_queries: int | None,
                  templates: Sequence[str]) -> list[QAItem]:
    """Queries cycling over the answers with notes, as in the clinic generator: per cycle
    another paraphrase combination, order and template; ``patient`` a unit with the answer."""
    present = [i for i in range(len(answers)) if by_answer.get(i)]
    if not present:
        return []
    offsets = {i: int(rng.integers(len(by_answer[i]))) for i in present}
    base = {i: [int(v) for v in rng.integers(0, 2, size=len(lay[i]))] for i in present}
    total = len(present) if n_queries is None else n_queries
    width = max(4, len(str(total)))
    queries: list[QAItem] = []
    for k in range(total):
        i, cycle = present[k % len(present)], k // len(present)
        phrases = [lay[i][s][(base[i][s] + (cycle >> s)) % 2]
                   for s in (int(s) for s in rng.permutation(len(lay[i])))]
        template = _pick(rng, templates)
        asker = ""
        while "{asker}" in template and not asker:  # a fresh name sharing no word with it
            asker = people.new()
            asker = "" if shared_words(asker, answers[i]) else asker
        question = template.format(**fields[i], **{slot: _join(phrases)}, asker=asker)
        _check_question(question, answers[i], answers)
        pool = by_answer[i]
        queries.append(QAItem(id=f"q-{k + 1:0{width}d}", question=question, answer=answers[i],
                              patient=pool[(offsets[i] + cycle) % len(pool)]))
    return queries


def resolve_templates(kind: str, templates: str | Path | None = None) -> tuple[str, TemplateSet]:
    """The ``kind`` generator's templates and the name a dataset records for them: the
    built-in set and ``"dev"`` for ``None`` or ``"dev"``, else the set in the TOML file
    ``templates`` (or ``<kind>.toml`` in that folder) and that file's path as given.
    Raises :class:`~dpsynrag.eval.template_files.TemplateFileError` (a ValueError) for a file
    that cannot be read or is not a valid set."""
    if kind not in ORDINARY_KINDS:
        raise ValueError(f"kind must be one of {', '.join(ORDINARY_KINDS)}")
    if templates is None or templates == DEV_TEMPLATES:
        return DEV_TEMPLATES, BUILTIN_TEMPLATES[kind]
    return template_file(templates, kind).as_posix(), load_template_set(templates, kind)


# ------------------------------------------------------------------ conditions generator
def make_conditions_dataset(*, n_notes: int = 4000, n_queries: int | None = None,
                            seed: int = 0,
                            templates: str | Path | None = None) -> ConditionsDataset:
    """Generate ``n_notes`` doctor notes about the 40 :data:`CONDITIONS` and the queries.

    One note per patient; see the module docstring for the rules. Deterministic in all
    arguments (public synthetic data, not DP noise).
    """
    _validate(n_notes, n_queries)
    _check_conditions()
    recorded, chosen = resolve_templates("conditions", templates)
    rng = np.random.default_rng(seed)
    ranks, shares, counts = _frequencies(n_notes, len(CONDITIONS), rng)
    people = _Names(rng)
    doctors = [people.new() for _ in range(N_DOCTORS)]
    width = max(5, len(str(n_notes)))
    notes: list[OrdinaryNote] = []
    by_answer: dict[int, list[str]] = {}
    for k, c in enumerate(rng.permutation(np.repeat(np.arange(len(CONDITIONS)), counts))):
        name, treatment, symptoms = CONDITIONS[int(c)]
        patient = people.new()
        by_answer.setdefault(int(c), []).append(patient)
        clinical = [symptoms[int(s)][0] for s in rng.permutation(len(symptoms))]
        text = _pick(rng, chosen.notes).format(
            name=patient, age=int(rng.integers(18, 90)), date=_random_day(rng),
            symptoms=_join(clinical), doctor=_pick(rng, doctors), condition=name,
            treatment=treatment)
        notes.append(OrdinaryNote(id=f"note-{k + 1:0{width}d}", text=text,
                                  unit=f"patient-{k + 1:0{width}d}", person=patient,
                                  answer=name))
    conditions = tuple(
        Condition(name=name, symptoms=tuple(s for s, _ in symptoms), treatment=treatment,
                  rank=ranks[i], frequency=shares[i], n_notes=counts[i])
        for i, (name, treatment, symptoms) in enumerate(CONDITIONS))
    queries = _make_queries(
        rng, people, answers=[c[0] for c in CONDITIONS],
        lay=[[lay for _, lay in c[2]] for c in CONDITIONS], fields=[{} for _ in CONDITIONS],
        slot="symptoms", by_answer=by_answer, n_queries=n_queries, templates=chosen.queries)
    return ConditionsDataset(seed=seed, templates=recorded, conditions=conditions,
                             notes=tuple(notes), queries=tuple(queries))


# ------------------------------------------------------------------ films generator
def _title(rng: np.random.Generator) -> str:
    form = int(rng.integers(6))
    adj, noun = _pick(rng, _ADJECTIVES), _pick(rng, _NOUNS)
    if form == 0:
        return f"The {adj} {noun}"
    if form == 1:
        return f"{adj} {noun}"
    if form == 2:
        return f"{_pick(rng, _NUMBERS)} {_pick(rng, _PLURALS)}"
    if form == 3:
        return f"{adj} {noun} {int(rng.integers(2, 5))}"
    if form == 4:
        return f"{adj} {_pick(rng, _PLURALS)}"
    return f"{adj} {noun} {int(rng.integers(1950, 2020))}"


def _titles(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` unique titles, none containing another nor sharing its words but for "The" and
    numbers ("Blue Horizon 2", "Blue Horizon 1994"), no word in more than two titles, every
    token English or a number."""
    titles: list[str] = []
    cores: set[tuple[str, ...]] = set()
    uses: dict[str, int] = {}
    for _ in range(100 * n):
        title = _title(rng)
        core = tuple(t for t in title.lower().split() if not t.isdigit() and t != "the")
        if (core in cores or any(uses.get(t, 0) >= 2 for t in core)
                or any(contains_answer(title, t) or contains_answer(t, title) for t in titles)):
            continue
        if not all(tok.isdigit() or _english_or_plural(tok.lower()) for tok in title.split()):
            raise RuntimeError(f"title {title!r} has a word that is not English")
        titles.append(title)
        cores.add(core)
        uses.update({t: uses.get(t, 0) + 1 for t in core})
        if len(titles) == n:
            return titles
    raise RuntimeError("could not make enough distinct titles")  # pragma: no cover


def _plot_sets(titles: Sequence[str], rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Three plot elements per film: least-used first (random tie-break), no element whose
    paraphrase shares a word with the title or that mentions any title, unique sets, no
    shared pair while that can be had."""
    n = len(PLOT_ELEMENTS)
    banned = {e for e, (phrase, lay) in enumerate(PLOT_ELEMENTS)
              if any(contains_answer(text, t) for text in (phrase, *lay) for t in titles)}
    usage = np.zeros(n)
    taken: set[tuple[int, ...]] = set()
    pairs: set[tuple[int, int]] = set()
    chosen: list[tuple[int, ...]] = []
    for title in titles:
        allowed = [e for e in range(n) if e not in banned
                   and not any(shared_words(p, title) for p in PLOT_ELEMENTS[e][1])]
        best: tuple[int, ...] | None = None
        best_shared = 4
        for attempt in range(40):
            noise = rng.random(len(allowed)) * (1.5 + attempt)
            order = np.argsort(usage[allowed] + noise)[:3]
            candidate = tuple(sorted(allowed[int(j)] for j in order))
            shared = sum((a, b) in pairs for a in candidate for b in candidate if a < b)
            if candidate not in taken and shared < best_shared:
                best, best_shared = candidate, shared
            if best_shared == 0:
                break
        if best is None:  # pragma: no cover - 40 tries over ~50 elements
            raise RuntimeError(f"no plot for {title!r}")
        taken.add(best)
        pairs.update((a, b) for a in best for b in best if a < b)
        usage[list(best)] += 1
        chosen.append(tuple(int(e) for e in rng.permutation(best)))
    return chosen


def make_films_dataset(*, n_notes: int = 4000, n_queries: int | None = None, seed: int = 0,
                       templates: str | Path | None = None) -> FilmsDataset:
    """Generate 40 invented films, ``n_notes`` viewer notes and the queries.

    One note per viewer; see the module docstring for the rules. Deterministic in all
    arguments (public synthetic data, not DP noise).
    """
    _validate(n_notes, n_queries)
    recorded, chosen = resolve_templates("films", templates)
    rng = np.random.default_rng(seed)
    n_films = 40
    titles = _titles(n_films, rng)
    genres = [_pick(rng, _GENRES) for _ in titles]
    plots = _plot_sets(titles, rng)
    ranks, shares, counts = _frequencies(n_notes, n_films, rng)
    people = _Names(rng)
    directors = [people.new() for _ in range(N_DIRECTORS)]
    director_of = [_pick(rng, directors) for _ in titles]
    width = max(5, len(str(n_notes)))
    notes: list[OrdinaryNote] = []
    by_answer: dict[int, list[str]] = {}
    for k, f in enumerate(int(f) for f in
                          rng.permutation(np.repeat(np.arange(n_films), counts))):
        viewer = people.new()
        by_answer.setdefault(f, []).append(viewer)
        plot = [PLOT_ELEMENTS[plots[f][int(e)]][0] for e in rng.permutation(len(plots[f]))]
        text = _pick(rng, chosen.notes).format(
            name=viewer, title=titles[f], date=_random_day(rng), genre=genres[f],
            plot=_join(plot), director=director_of[f], stars=int(rng.integers(2, 6)))
        notes.append(OrdinaryNote(id=f"note-{k + 1:0{width}d}", text=text,
                                  unit=f"viewer-{k + 1:0{width}d}", person=viewer,
                                  answer=titles[f]))
    films = tuple(
        Film(title=titles[f], genre=genres[f],
             plot=tuple(PLOT_ELEMENTS[e][0] for e in plots[f]), director=director_of[f],
             rank=ranks[f], frequency=shares[f], n_notes=counts[f])
        for f in range(n_films))
    queries = _make_queries(
        rng, people, answers=titles, lay=[[PLOT_ELEMENTS[e][1] for e in p] for p in plots],
        fields=[{"genre": g} for g in genres], slot="plot", by_answer=by_answer,
        n_queries=n_queries, templates=chosen.queries)
    return FilmsDataset(seed=seed, templates=recorded, films=films, notes=tuple(notes),
                        queries=tuple(queries))


# ------------------------------------------------------------------ files
def make_ordinary_dataset(kind: str, *, n_notes: int = 4000, n_queries: int | None = None,
                          seed: int = 0, templates: str | Path | None = None
                          ) -> ConditionsDataset | FilmsDataset:
    """:func:`make_conditions_dataset` or :func:`make_films_dataset` by ``kind``."""
    if kind not in ORDINARY_KINDS:
        raise ValueError(f"kind must be one of {', '.join(ORDINARY_KINDS)}")
    make = make_conditions_dataset if kind == "conditions" else make_films_dataset
    return make(n_notes=n_notes, n_queries=n_queries, seed=seed, templates=templates)


def save_dataset(data: ConditionsDataset | FilmsDataset, out_dir: Path | str) -> dict[str, Path]:
    """Write ``notes.jsonl`` (``id, text, unit``), ``queries.jsonl`` (``id, question,
    answer, patient``: the unit's person, for leakage checks) and ``<kind>.json`` (the public
    description). Returns the paths keyed ``notes``, ``queries`` and the kind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"notes": out / "notes.jsonl", "queries": out / "queries.jsonl",
             data.kind: out / f"{data.kind}.json"}
    paths["notes"].write_text(
        "".join(json.dumps({"id": n.id, "text": n.text, "unit": n.unit}, ensure_ascii=False)
                + "\n" for n in data.notes), encoding="utf-8")
    paths["queries"].write_text(
        "".join(json.dumps({"id": q.id, "question": q.question, "answer": q.answer,
                            "patient": q.patient}, ensure_ascii=False) + "\n"
                for q in data.queries), encoding="utf-8")
    paths[data.kind].write_text(json.dumps(data.describe(), ensure_ascii=False, indent=2)
                                + "\n", encoding="utf-8")
    return paths


#: Where the repository keeps the template sets of past measurements (from its root).
_SETS_FOLDER = Path("benchmarks", "sets")


def generation_recipe(root: Path | str, kind: str) -> dict[str, Any] | None:
    """How the set in ``root`` was made, from its public description ``<kind>.json``: the
    ``dpsynrag dataset`` command, and whether running it again writes exactly the set's
    ``notes.jsonl`` and ``queries.jsonl`` (False when they were edited after generation, or
    the template file it names was edited, or cannot be found: a relative path is read from
    the working directory, as the command would). None when ``root`` holds no description of
    this generator.

    A set written while the template sets lived in the package names its set by the
    variant's name ("blind9"); the command names that variant's file today,
    ``benchmarks/sets/<name>/<kind>.toml``, where the working directory holds it."""
    root = Path(root)
    try:
        header = json.loads((root / f"{kind}.json").read_text(encoding="utf-8"))
        generator = str(header["generator"])
        seed, n_notes = int(header["seed"]), int(header["n_notes"])
        n_queries, templates = int(header["n_queries"]), str(header["templates"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if generator != f"dpsynrag.eval.datasets_ordinary/{kind}-v1":
        return None
    legacy = _SETS_FOLDER / templates / f"{kind}.toml"
    if (templates != DEV_TEMPLATES and not Path(templates).exists() and "/" not in templates
            and legacy.is_file()):
        templates = legacy.as_posix()
    command = (f"dpsynrag dataset {kind} --templates {shlex.quote(templates)} "
               f"--notes {n_notes} --queries {n_queries} --seed {seed}")
    try:
        again = make_ordinary_dataset(kind, n_notes=n_notes, n_queries=n_queries, seed=seed,
                                      templates=templates)
    except ValueError:
        return {"command": command, "reproduced": False}
    with tempfile.TemporaryDirectory() as scratch:
        written = save_dataset(again, scratch)
        same = all(_same_bytes(written[name], root / written[name].name)
                   for name in ("notes", "queries"))
    return {"command": command, "reproduced": same}


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def write_conditions_dataset(out_dir: Path | str, *, n_notes: int = 4000,
                             n_queries: int | None = None, seed: int = 0,
                             templates: str | Path | None = None) -> dict[str, Path]:
    """Generate a ``conditions`` set and write it (keys ``notes``, ``queries``,
    ``conditions``). Same arguments, same bytes."""
    return save_dataset(make_conditions_dataset(n_notes=n_notes, n_queries=n_queries,
                                                seed=seed, templates=templates), out_dir)


def write_films_dataset(out_dir: Path | str, *, n_notes: int = 4000,
                        n_queries: int | None = None, seed: int = 0,
                        templates: str | Path | None = None) -> dict[str, Path]:
    """Generate a ``films`` set and write it (keys ``notes``, ``queries``, ``films``). Same
    arguments, same bytes."""
    return save_dataset(make_films_dataset(n_notes=n_notes, n_queries=n_queries, seed=seed,
                                           templates=templates), out_dir)
